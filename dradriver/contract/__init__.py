"""The handler contract and what claims are judged by: hook specs, the registry, the
config schema, derived names, the rules for claims' addresses."""
