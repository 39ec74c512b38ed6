"""A third-party handler plugin, as an operator would install one: a type the built-in
handlers do not know (`fpga`), for generating admission policies with it."""

from __future__ import annotations

from typing import Any

from dradriver.contract.hookspecs import hookimpl
from dradriver.contract.registry import HandlerRegistry


class FpgaHandler:
    """Schema only: `fpga` devices of kind `bitstream` with a required image."""

    type = "fpga"
    kinds = ("bitstream",)

    def schema(self, kind: str) -> dict[str, Any]:
        """The parameters of a bitstream."""
        return {
            "type": "object",
            "properties": {
                "kind": {"type": "string"},
                "image": {"type": "string", "minLength": 1},
                "slots": {"type": "integer", "minimum": 1, "maximum": 4},
            },
            "required": ["image"],
            "additionalProperties": False,
        }


class FpgaPlugin:
    """The plugin object an entry point of `dradriver.handlers` would name."""

    @hookimpl
    def dradriver_handlers(self) -> list[FpgaHandler]:
        """Its one handler."""
        return [FpgaHandler()]


def registry() -> HandlerRegistry:
    """The built-in handlers (and installed plugins) plus the fpga plugin."""
    return HandlerRegistry({"fpga": FpgaPlugin()})
