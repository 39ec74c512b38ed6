"""The injection mode a started driver takes for new claims (CDI or NRI), and the NRI
plugin that mode may need."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from dradriver.apiserver.kubeapi import KubeApi
from dradriver.apiserver.networkstatus import NetworkStatusWriter
from dradriver.apiserver.status import StatusWriter
from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.claims.budget import CallGate
from dradriver.claims.failures import FailureEvents
from dradriver.claims.prefetch import ClaimPrefetch
from dradriver.claims.prepare import Preparer
from dradriver.contract.hookspecs import CDI, NRI
from dradriver.nri import NriPlugin
from dradriver.nrimode.sandboxes import PodSandboxes
from dradriver.settings import Settings
from dradriver.state.injection import AUTO

logger = logging.getLogger(__name__)

# How long the NRI plugin may take to be accepted by the runtime at start (it takes
# milliseconds when NRI is on); auto mode falls back to CDI after it.
NRI_REGISTRATION_WAIT = 5.0


def nri_plugin(
    settings: Settings,
    preparer: Preparer,
    gate: CallGate,
    metrics: Metrics,
    status: StatusWriter,
    failures: FailureEvents,
    prefetch: ClaimPrefetch,
    api: KubeApi,
) -> NriPlugin:
    """The NRI plugin over the preparer's claims, not started yet."""
    writer = NetworkStatusWriter(api) if settings.cni_network_status else None
    sandboxes = PodSandboxes(
        preparer.lifecycle, gate, metrics, status=status, failures=failures, network_status=writer
    )
    sandboxes.containers.pods = prefetch.pods  # which claims a pod may name
    return NriPlugin(settings.nri_socket, sandboxes, index=settings.nri_plugin_index)


def choose(settings: Settings, plugin: NriPlugin, nri_claims: Sequence[str]) -> tuple[str, bool]:
    """The injection mode for new claims, and whether the NRI plugin runs: `cdi` never
    starts it (unless claims prepared in NRI mode exist), `nri` starts it and keeps it
    whatever happens, `auto` keeps it and says NRI if the runtime accepts it in time,
    else CDI. The mode is logged with the reason."""
    wanted = settings.injection
    socket = settings.nri_socket
    needed, warn = bool(nri_claims), False
    if wanted == CDI:
        mode, why = CDI, "--injection cdi"
    elif wanted == AUTO and not socket.exists():
        mode, why = CDI, f"auto: no NRI socket at {socket} (NRI is off in the runtime)"
    else:
        plugin.start()
        unreachable = plugin.first_attempt(NRI_REGISTRATION_WAIT)
        accepted = unreachable is None and plugin.wait_registered(NRI_REGISTRATION_WAIT)
        if wanted == NRI:
            mode, needed, warn = NRI, True, not accepted
            why = "--injection nri" + (
                ""
                if accepted
                else f"; the runtime has not accepted the NRI plugin at {socket} yet: pods "
                "get no interfaces until it does"
            )
        elif accepted:
            mode, needed = NRI, True
            why = f"auto: the runtime accepted the NRI plugin at {socket}"
        elif unreachable is not None:
            mode, why = CDI, f"auto: nothing accepts connections at {socket} ({unreachable})"
        else:
            mode = CDI
            why = (
                f"auto: the runtime did not accept the NRI plugin at {socket} within "
                f"{NRI_REGISTRATION_WAIT:g} s"
            )
    if needed and not plugin.started:
        plugin.start()
        if not socket.exists():
            for uid in nri_claims:
                event(
                    logger,
                    logging.ERROR,
                    "claim prepared in NRI mode, but there is no NRI socket: its pods get no "
                    "interfaces until the runtime has NRI on",
                    claim=uid,
                    socket=str(socket),
                )
    elif not needed and plugin.started:
        plugin.stop()
    level = logging.WARNING if warn else logging.INFO
    event(
        logger,
        level,
        "injection mode",
        mode=mode,
        reason=why,
        nri_plugin="running" if needed else "off",
        nri_claims=len(nri_claims),
    )
    return mode, needed
