"""The NRI Plugin service of one connection: Configure, Synchronize, StateChange,
CreateContainer, Shutdown.

Handlers run on the reader thread and never block it: the core's work goes to the
HandlerRunner, and every call gets an answer by its deadline, which is the plugin's
`event_timeout` or, if shorter, 3/4 of the time the runtime gives the call (the
shorter of its configured request timeout and the call's own `timeout_nano`). Past its
own timeout containerd drops the plugin and lets the pod start without it, so an
explicit error in time is always better.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage

from dradriver.base.log import event
from dradriver.nri.dispatch import HandlerRunner
from dradriver.nri.pods import Container, PodSandbox, SandboxHandler
from dradriver.nri.proto import api_pb2
from dradriver.nri.rpc import Handler, IncomingCall
from dradriver.nri.ttrpc import Code

log = logging.getLogger(__name__)

PLUGIN_SERVICE = api_pb2.DESCRIPTOR.services_by_name["Plugin"].full_name
RUNTIME_SERVICE = api_pb2.DESCRIPTOR.services_by_name["Runtime"].full_name
EVENT_NAMES = {
    api_pb2.RUN_POD_SANDBOX: "RunPodSandbox",
    api_pb2.STOP_POD_SANDBOX: "StopPodSandbox",
    api_pb2.REMOVE_POD_SANDBOX: "RemovePodSandbox",
}  # the pod events, which come as StateChange
SUBSCRIBED = {**EVENT_NAMES, api_pb2.CREATE_CONTAINER: "CreateContainer"}


def event_mask(events: Iterable[int]) -> int:
    """NRI's subscription mask: bit (e - 1) for each event e (pkg/api/event.go)."""
    return sum(1 << (e - 1) for e in set(events))


EVENT_MASK = event_mask(SUBSCRIBED)  # 0xf
RUNTIME_SHARE = 0.75  # of the runtime's time for a call that the core may use
DEFAULT_REQUEST_TIMEOUT = 2.0  # NRI's DefaultPluginRequestTimeout, until Configure says more
MAX_ERROR_LEN = 1024
EMPTY = api_pb2.Empty().SerializeToString()


@dataclass(frozen=True)
class RuntimeInfo:
    """What the runtime said about itself in Configure."""

    name: str
    version: str
    request_timeout: float  # seconds the runtime waits for each call
    registration_timeout: float


class PluginService:
    """Answers the runtime's calls on one connection."""

    def __init__(
        self,
        handler: SandboxHandler,
        runner: HandlerRunner,
        event_timeout: float,
        on_synchronized: Callable[[], None],
    ) -> None:
        self._handler = handler
        self._runner = runner
        self._event_timeout = event_timeout
        self._on_synchronized = on_synchronized
        self._sync_pods: list[PodSandbox] = []
        self.runtime: RuntimeInfo | None = None

    def handlers(self) -> dict[tuple[str, str], Handler]:
        """The ttrpc methods this service answers."""
        return {
            (PLUGIN_SERVICE, "Configure"): self._configure,
            (PLUGIN_SERVICE, "Synchronize"): self._synchronize,
            (PLUGIN_SERVICE, "StateChange"): self._state_change,
            (PLUGIN_SERVICE, "CreateContainer"): self._create_container,
            (PLUGIN_SERVICE, "Shutdown"): self._shutdown,
        }

    def _budget(self, call: IncomingCall) -> float:
        """The plugin's time for a call: within both what Configure and the call say."""
        runtime = self.runtime.request_timeout if self.runtime else DEFAULT_REQUEST_TIMEOUT
        remote = call.remote_timeout if call.remote_timeout is not None else runtime
        return min(self._event_timeout, min(runtime, remote) * RUNTIME_SHARE)

    def _configure(self, call: IncomingCall) -> None:
        req = _parse(call, api_pb2.ConfigureRequest())
        if req is None:
            return
        self.runtime = RuntimeInfo(
            name=req.runtime_name,
            version=req.runtime_version,
            request_timeout=req.request_timeout / 1000 or DEFAULT_REQUEST_TIMEOUT,
            registration_timeout=req.registration_timeout / 1000,
        )
        if self._event_timeout > self.runtime.request_timeout * RUNTIME_SHARE:
            event(
                log,
                logging.WARNING,
                "NRI event timeout shortened to fit the runtime's request timeout",
                event_timeout=self._event_timeout,
                request_timeout=self.runtime.request_timeout,
            )
        event(
            log,
            logging.INFO,
            "configured by the runtime",
            runtime=req.runtime_name,
            version=req.runtime_version,
            request_timeout=self.runtime.request_timeout,
            events=",".join(SUBSCRIBED.values()),
        )
        call.reply(api_pb2.ConfigureResponse(events=EVENT_MASK).SerializeToString())

    def _synchronize(self, call: IncomingCall) -> None:
        req = _parse(call, api_pb2.SynchronizeRequest())
        if req is None:
            return
        self._sync_pods += [PodSandbox.from_proto(p) for p in req.pods]
        if req.more:  # the runtime splits big states; it wants `more` echoed, nothing else
            call.reply(api_pb2.SynchronizeResponse(more=True).SerializeToString())
            return
        pods, self._sync_pods = self._sync_pods, []
        budget = self._budget(call)
        started = time.monotonic()
        deadline = started + budget

        def outcome(exc: BaseException | None) -> None:
            took = round((time.monotonic() - started) * 1000)
            if exc is not None:
                event(log, logging.ERROR, "synchronize failed", pods=len(pods), error=exc)
                call.fail(Code.UNKNOWN, _clip(f"dra-driver: synchronize: {exc}"))
            elif call.reply(api_pb2.SynchronizeResponse().SerializeToString()):
                event(log, logging.INFO, "synchronized with the runtime", pods=len(pods), ms=took)
                self._on_synchronized()
            else:
                event(log, logging.WARNING, "synchronize finished too late", ms=took)

        call.answer_by(
            deadline,
            f"dra-driver: synchronize of {len(pods)} pods not done within {budget:.2f}s",
            on_expire=lambda: event(log, logging.ERROR, "synchronize timed out", pods=len(pods)),
        )
        self._runner.submit(
            "(synchronize)", lambda: self._handler.synchronize(pods), deadline, outcome
        )

    def _state_change(self, call: IncomingCall) -> None:
        req = _parse(call, api_pb2.StateChangeEvent())
        if req is None:
            return
        name = EVENT_NAMES.get(req.event)
        if name is None:  # not subscribed; the runtime should not send it, but it is harmless
            event(log, logging.DEBUG, "ignored NRI event", event=req.event)
            call.reply(EMPTY)
            return
        pod = PodSandbox.from_proto(req.pod)
        fn = {
            api_pb2.RUN_POD_SANDBOX: self._handler.run_pod_sandbox,
            api_pb2.STOP_POD_SANDBOX: self._handler.stop_pod_sandbox,
            api_pb2.REMOVE_POD_SANDBOX: self._handler.remove_pod_sandbox,
        }[req.event]
        teardown = req.event != api_pb2.RUN_POD_SANDBOX
        self._dispatch(call, name, pod, lambda: fn(pod), EMPTY, teardown=teardown)

    def _create_container(self, call: IncomingCall) -> None:
        req = _parse(call, api_pb2.CreateContainerRequest())
        if req is None:
            return
        pod = PodSandbox.from_proto(req.pod)
        container = Container.from_proto(req.container)
        self._dispatch(
            call,
            f"CreateContainer of {container.name}",
            pod,
            lambda: self._handler.create_container(pod, container),
            api_pb2.CreateContainerResponse().SerializeToString(),
            teardown=False,
        )

    def _dispatch(
        self,
        call: IncomingCall,
        name: str,
        pod: PodSandbox,
        fn: Callable[[], None],
        reply: bytes,
        *,
        teardown: bool,
    ) -> None:
        """Run a pod's event on the runner, answering `reply` or the error by the deadline;
        a teardown is owed and runs late, anything else is dropped when the pod is busy."""
        budget = self._budget(call)
        started = time.monotonic()
        deadline = started + budget
        fields = {"event": name, "pod_uid": pod.uid, "pod": f"{pod.namespace}/{pod.name}"}

        def outcome(exc: BaseException | None) -> None:
            took = round((time.monotonic() - started) * 1000)
            if exc is not None:
                event(log, logging.ERROR, "NRI event failed", **fields, ms=took, error=exc)
                call.fail(Code.UNKNOWN, _clip(f"dra-driver: {name} of pod {pod}: {exc}"))
            elif call.reply(reply):
                event(log, logging.INFO, "NRI event handled", **fields, ms=took)
            else:
                event(
                    log,
                    logging.WARNING,
                    "NRI event handled after the runtime had its answer",
                    **fields,
                    ms=took,
                )

        key = pod.uid or pod.id
        if self._runner.busy(key):
            # The runtime blocks every pod's NRI calls while it waits for one: do not
            # make it wait for a pod whose earlier call is stuck. A teardown is still
            # owed, so it runs when that call returns; anything else is dropped.
            event(
                log,
                logging.WARNING,
                "NRI event answered at once: pod busy",
                **fields,
                runs_later=teardown,
            )
            later = "; it runs when that returns" if teardown else ""
            call.fail(
                Code.UNAVAILABLE,
                f"dra-driver: {name} of pod {pod}: an earlier call for this pod is "
                f"still running{later}",
            )
            if not teardown:
                return
        else:
            call.answer_by(
                deadline,
                f"dra-driver: {name} of pod {pod} not handled within {budget:.2f}s",
                on_expire=lambda: event(
                    log, logging.ERROR, "NRI event timed out", **fields, timeout=round(budget, 3)
                ),
            )
        self._runner.submit(
            key,
            fn,
            deadline,
            outcome,
            run_late=teardown,
            skipped=lambda why: event(
                log, logging.WARNING, "NRI event not handled", **fields, reason=why
            ),
        )

    def _shutdown(self, call: IncomingCall) -> None:
        event(log, logging.INFO, "the runtime is shutting down")
        call.reply(EMPTY)


M = TypeVar("M", bound=ProtoMessage)


def _parse(call: IncomingCall, msg: M) -> M | None:
    """Parse the call's payload into `msg`, or answer INVALID_ARGUMENT and return None."""
    try:
        msg.ParseFromString(call.payload)
    except DecodeError as exc:
        event(log, logging.WARNING, "malformed NRI request", method=call.method, error=exc)
        call.fail(Code.INVALID_ARGUMENT, f"{call.method}: cannot parse request: {exc}")
        return None
    return msg


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_LEN else text[: MAX_ERROR_LEN - 3] + "..."
