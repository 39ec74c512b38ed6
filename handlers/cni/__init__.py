"""cni plugin: secondary networks made by standard CNI plugins in the pod sandbox, from a
NetworkAttachmentDefinition or a network configuration in the claim (docs/cni.md).

It publishes no device of its own: a claim takes the node's virtual device (a `slots`
unit), or a host NIC or VF for a plugin that takes a whole device (host-device).
"""

from __future__ import annotations

from dradriver.contract.hookspecs import Default, Handler, hookimpl

from .handler import KIND, TYPE, CniHandler


@hookimpl
def dradriver_handlers() -> list[Handler]:
    """The CNI handler."""
    return [CniHandler()]


@hookimpl
def dradriver_defaults() -> list[Default]:
    """A cni config without kind gets the one kind."""
    return [Default(TYPE, KIND)]
