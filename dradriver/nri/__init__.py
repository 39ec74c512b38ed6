"""NRI plugin runtime: the driver as a plugin of containerd's Node Resource Interface.

The core implements `SandboxHandler` and runs one `NriPlugin`; everything below that
(multiplexer, ttrpc, the Plugin service) stays inside this package.
"""

from __future__ import annotations

from dradriver.nri.plugin import DEFAULT_SOCKET, NriPlugin
from dradriver.nri.pods import Container, PodSandbox, SandboxHandler

__all__ = ["DEFAULT_SOCKET", "Container", "NriPlugin", "PodSandbox", "SandboxHandler"]
