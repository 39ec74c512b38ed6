from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Event(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN: _ClassVar[Event]
    RUN_POD_SANDBOX: _ClassVar[Event]
    STOP_POD_SANDBOX: _ClassVar[Event]
    REMOVE_POD_SANDBOX: _ClassVar[Event]
    CREATE_CONTAINER: _ClassVar[Event]
    POST_CREATE_CONTAINER: _ClassVar[Event]
    START_CONTAINER: _ClassVar[Event]
    POST_START_CONTAINER: _ClassVar[Event]
    UPDATE_CONTAINER: _ClassVar[Event]
    POST_UPDATE_CONTAINER: _ClassVar[Event]
    STOP_CONTAINER: _ClassVar[Event]
    REMOVE_CONTAINER: _ClassVar[Event]
    UPDATE_POD_SANDBOX: _ClassVar[Event]
    POST_UPDATE_POD_SANDBOX: _ClassVar[Event]
    VALIDATE_CONTAINER_ADJUSTMENT: _ClassVar[Event]
    LAST: _ClassVar[Event]
UNKNOWN: Event
RUN_POD_SANDBOX: Event
STOP_POD_SANDBOX: Event
REMOVE_POD_SANDBOX: Event
CREATE_CONTAINER: Event
POST_CREATE_CONTAINER: Event
START_CONTAINER: Event
POST_START_CONTAINER: Event
UPDATE_CONTAINER: Event
POST_UPDATE_CONTAINER: Event
STOP_CONTAINER: Event
REMOVE_CONTAINER: Event
UPDATE_POD_SANDBOX: Event
POST_UPDATE_POD_SANDBOX: Event
VALIDATE_CONTAINER_ADJUSTMENT: Event
LAST: Event

class RegisterPluginRequest(_message.Message):
    __slots__ = ("plugin_name", "plugin_idx")
    PLUGIN_NAME_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_IDX_FIELD_NUMBER: _ClassVar[int]
    plugin_name: str
    plugin_idx: str
    def __init__(self, plugin_name: _Optional[str] = ..., plugin_idx: _Optional[str] = ...) -> None: ...

class ConfigureRequest(_message.Message):
    __slots__ = ("config", "runtime_name", "runtime_version", "registration_timeout", "request_timeout")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    config: str
    runtime_name: str
    runtime_version: str
    registration_timeout: int
    request_timeout: int
    def __init__(self, config: _Optional[str] = ..., runtime_name: _Optional[str] = ..., runtime_version: _Optional[str] = ..., registration_timeout: _Optional[int] = ..., request_timeout: _Optional[int] = ...) -> None: ...

class ConfigureResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: int
    def __init__(self, events: _Optional[int] = ...) -> None: ...

class SynchronizeRequest(_message.Message):
    __slots__ = ("pods", "more")
    PODS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    pods: _containers.RepeatedCompositeFieldContainer[PodSandbox]
    more: bool
    def __init__(self, pods: _Optional[_Iterable[_Union[PodSandbox, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...

class SynchronizeResponse(_message.Message):
    __slots__ = ("more",)
    MORE_FIELD_NUMBER: _ClassVar[int]
    more: bool
    def __init__(self, more: _Optional[bool] = ...) -> None: ...

class StateChangeEvent(_message.Message):
    __slots__ = ("event", "pod")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    event: Event
    pod: PodSandbox
    def __init__(self, event: _Optional[_Union[Event, str]] = ..., pod: _Optional[_Union[PodSandbox, _Mapping]] = ...) -> None: ...

class CreateContainerRequest(_message.Message):
    __slots__ = ("pod", "container")
    POD_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    pod: PodSandbox
    container: Container
    def __init__(self, pod: _Optional[_Union[PodSandbox, _Mapping]] = ..., container: _Optional[_Union[Container, _Mapping]] = ...) -> None: ...

class CreateContainerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Container(_message.Message):
    __slots__ = ("id", "pod_sandbox_id", "name", "env")
    ID_FIELD_NUMBER: _ClassVar[int]
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    id: str
    pod_sandbox_id: str
    name: str
    env: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., pod_sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., env: _Optional[_Iterable[str]] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PodSandbox(_message.Message):
    __slots__ = ("id", "name", "uid", "namespace", "linux")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LINUX_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    uid: str
    namespace: str
    linux: LinuxPodSandbox
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., uid: _Optional[str] = ..., namespace: _Optional[str] = ..., linux: _Optional[_Union[LinuxPodSandbox, _Mapping]] = ...) -> None: ...

class LinuxPodSandbox(_message.Message):
    __slots__ = ("namespaces",)
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedCompositeFieldContainer[LinuxNamespace]
    def __init__(self, namespaces: _Optional[_Iterable[_Union[LinuxNamespace, _Mapping]]] = ...) -> None: ...

class LinuxNamespace(_message.Message):
    __slots__ = ("type", "path")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    type: str
    path: str
    def __init__(self, type: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...
