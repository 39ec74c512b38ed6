"""`python -m dradriver` runs the CLI."""

from dradriver.cli import main

raise SystemExit(main())
