"""An in-memory Kubernetes API server on loopback, for tests of code that talks to a cluster.

No real API server can run on the machines where sarl's tests run, so the operator tests
(``tests/operators``) and the cluster-client tests (``tests/sarl/cluster``) use kmock's
``KubernetesEmulator`` (by kopf's author): a real HTTP server that stores objects in memory and
serves discovery, create/get/list/watch/patch/delete the way the API server does, but simply
(merge patches, no admission, no validation against the CRD schema, no garbage collector).
Whatever is asserted against it must be re-checked on a real cluster: the ``e2e`` tests do that.

:class:`KubeServer` runs the emulator in a thread with its own event loop, so synchronous code
(the ``kubernetes`` client, ``kopf.testing.KopfRunner``) can use it, and writes a kubeconfig
pointing at it. Needs the ``kmock`` package (the ``dev`` extra).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


@dataclass(frozen=True)
class Resource:
    """A resource to declare in discovery: ``group/version/plural`` and its kind."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")

    @property
    def key(self) -> str:
        group_version = f"{self.group}/{self.version}" if self.group else self.version
        return f"{group_version}/{self.plural}"


#: The resources sarl's operator and client use.
_STATUS = ("status",)
EXPERIMENTS = Resource("sarl.dev", "v1alpha1", "experiments", "Experiment", subresources=_STATUS)
PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", subresources=_STATUS)
ISVCS = Resource(
    "serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService", subresources=_STATUS
)
#: Kubeflow Trainer v2 (not in :data:`SARL_RESOURCES`, a Training Operator v1 cluster: add
#: :data:`TRAINER_V2_RESOURCES` to emulate a cluster with the Trainer installed).
TRAINJOBS = Resource(
    "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", subresources=_STATUS
)
CLUSTER_TRAINING_RUNTIMES = Resource(
    "trainer.kubeflow.org",
    "v1alpha1",
    "clustertrainingruntimes",
    "ClusterTrainingRuntime",
    namespaced=False,
)
TRAINER_V2_RESOURCES: tuple[Resource, ...] = (TRAINJOBS, CLUSTER_TRAINING_RUNTIMES)
#: Kueue's Workload (v0.19.2 storage version), read for the Experiment's Admitted condition.
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", subresources=_STATUS)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
PODS = Resource("", "v1", "pods", "Pod", subresources=("log", "status"))
EVENTS = Resource("", "v1", "events", "Event")
EVENTS_K8S = Resource("events.k8s.io", "v1", "events", "Event")
JOBS = Resource("batch", "v1", "jobs", "Job", subresources=("status",))
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
#: The operator's per-Experiment NetworkPolicies (sarl_operator.network_policies).
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
CRDS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
SARL_RESOURCES: tuple[Resource, ...] = (
    EXPERIMENTS,
    PYTORCHJOBS,
    ISVCS,
    WORKLOADS,
    CONFIGMAPS,
    SECRETS,
    PODS,
    EVENTS,
    EVENTS_K8S,
    JOBS,
    NAMESPACES,
    CRDS,
    NETWORK_POLICIES,
)


def _emulator_class() -> Any:
    """kmock's emulator plus what clients rely on from a real API server: ``uid``,
    ``creationTimestamp``, ``generateName``, ``generation`` (bumped on spec changes) and
    ``resourceVersion`` on writes (status writes included), a ``metadata.resourceVersion`` in
    a patch as a precondition (409 Conflict when the object has another: optimistic
    concurrency, as the operator's status timers use it), ``kind``/``apiVersion`` on lists,
    and pod logs (``set_log``)."""
    import datetime
    import itertools
    import uuid

    import kmock
    from kmock._internal import apps, dsl, enums, k8s, rendering

    class ReactionPerRequest(apps.RawHandler):
        """kmock's reaction matching, asked of the new request alone.

        kmock 0.8's ``RawHandler._handle`` (``kmock/_internal/apps.py``) finds the reaction for
        a request with ``request in reaction._source``: that re-filters *every request the
        server has served so far*, for each reaction, on each request — quadratic in the
        requests served (an operator test's ~1,200 requests took ~2.5 minutes, ~13 s here).
        Here a chain of filters and priorities holds the new request iff each filter's criteria
        accept it (what iterating the chain would find); any other view (slices, groups) is
        asked kmock's way. Same order (priority, then registration), same skipping of
        depleted reactions, same error when none matches.
        """

        __slots__ = ()

        async def _handle(self, request: Any) -> Any:
            for reaction in self._by_priority():
                if not self._holds(reaction._source, request) or reaction._disabled.is_set():
                    continue
                try:
                    return await reaction(request)
                except rendering.ReactionMismatchError:  # mismatched or depleted: never again
                    reaction._disabled.set()
                except NotImplementedError:  # matched, but nothing to respond with
                    pass
            raise NotImplementedError(f"no reaction matches {request}")

        def _by_priority(self) -> list[Any]:
            # Higher priorities first; shorter priority tuples padded with zeros (kmock's rule,
            # so that `fallback ** n` orders within the fallbacks); ties keep registration order.
            reactions = list(self._payloads)
            width = max((len(r.priorities) for r in reactions), default=0)

            def key(i: int) -> tuple[float, ...]:
                p = tuple(-x for x in reactions[i].priorities)
                return p + (0,) * (width - len(p))

            return [reactions[i] for i in sorted(range(len(reactions)), key=key)]

        def _holds(self, view: Any, request: Any) -> bool:
            while True:
                if view is self:  # served requests are appended before _handle: look from the end
                    return any(r is request for r in reversed(self._requests))
                if type(view) is dsl.Priority:
                    view = view._source
                elif type(view) is dsl.Filter:
                    if not view.criteria(request):
                        return False
                    view = view._source
                else:
                    return request in view  # kmock's own (full) check

    class SarlEmulator(kmock.KubernetesEmulator, ReactionPerRequest):
        def __attrs_post_init__(self) -> None:
            super().__attrs_post_init__()
            self._versions = itertools.count(1)
            self._kinds: dict[tuple[str, str], str] = {}
            self._logs: dict[tuple[str, str], str] = {}

        async def _handle(self, request: Any) -> Any:
            res, data = request.resource, request.data
            if res is not None and isinstance(data, dict) and request.action == enums.action.UPDATE:
                self._check_version(res, request.namespace, request.name, data)
                if request.subresource == "status":
                    data.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
            if res is not None and isinstance(data, dict) and request.subresource is None:
                meta = data.setdefault("metadata", {})
                if request.action == enums.action.CREATE:
                    data.setdefault("apiVersion", f"{res.group}/{res.version}".lstrip("/"))
                    data.setdefault("kind", self._kinds.get((res.group, res.plural), "Unknown"))
                    if not meta.get("name") and meta.get("generateName"):
                        meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                    meta.setdefault("uid", str(uuid.uuid4()))
                    meta.setdefault("generation", 1)
                    meta.setdefault(
                        "creationTimestamp",
                        datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    )
                    if request.namespace:
                        meta.setdefault("namespace", request.namespace)
                elif request.action == enums.action.UPDATE and "spec" in data:
                    key = (res, request.namespace, request.name)
                    if key in self.objects and not self.objects[key].deleted:
                        current = self.objects[key].raw.get("metadata", {})
                        meta["generation"] = int(current.get("generation") or 1) + 1
                if request.action in (enums.action.CREATE, enums.action.UPDATE):
                    meta["resourceVersion"] = str(next(self._versions))
            elif (
                res is not None
                and res.plural == "pods"
                and request.subresource == "log"
                and request.action == enums.action.FETCH
            ):
                text = self._logs.get((request.namespace or "", request.name or ""))
                if text is None:
                    raise kmock.KubernetesObjectNotFoundError()
                import aiohttp.web

                return aiohttp.web.Response(text=text, content_type="text/plain")
            return await super()._handle(request)

        def _check_version(
            self, res: Any, namespace: str | None, name: str | None, data: dict[str, Any]
        ) -> None:
            """The API server's precondition: a write naming ``metadata.resourceVersion`` is
            refused (409) unless the object still has that version (kubernetes v1.31.0,
            ``staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go``,
            ``Store.Update``: a resourceVersion other than the stored one is a Conflict with
            ``OptimisticLockErrorMsg``, the message below; a merge patch reaches it with the
            version it names). Checked before kmock takes
            its lock for the write: one event loop, and no await in between here, but a write
            waiting on that lock could still come first (a stand-in, not a guarantee)."""
            wanted = (data.get("metadata") or {}).get("resourceVersion")
            if wanted is None or name is None:
                return
            key = (res, namespace, name)
            if key not in self.objects or self.objects[key].deleted:
                return
            stored = (self.objects[key].raw.get("metadata") or {}).get("resourceVersion")
            if str(wanted) != str(stored):
                raise k8s.KubernetesObjectConflictError(
                    reason="Conflict",
                    message=(
                        f"Operation cannot be fulfilled on {res.plural} {name!r}: the object has "
                        "been modified; please apply your changes to the latest version and try "
                        "again"
                    ),
                )

        async def _serve_list(self, request: Any) -> Any:
            out: dict[str, Any] = await super()._serve_list(request)  # type: ignore[assignment]
            res = request.resource
            group_version = f"{res.group}/{res.version}" if res.group else res.version
            kind = self._kinds.get((res.group, res.plural), res.plural.capitalize())
            return {"apiVersion": group_version, "kind": f"{kind}List", **out}

    return SarlEmulator


@dataclass
class KubeServer:
    """kmock's Kubernetes emulator on ``127.0.0.1:<free port>`` in a background thread."""

    resources: tuple[Resource, ...] = SARL_RESOURCES
    url: str = ""
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _stop: asyncio.Event | None = field(default=None, init=False, repr=False)
    _emulator: Any = field(default=None, init=False, repr=False)

    def start(self, timeout: float = 15.0) -> KubeServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(ready))
            except BaseException as e:  # reported to start()'s caller
                errors.append(e)
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="kube-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout) or errors:
            raise RuntimeError(f"kmock server did not start: {errors[:1]}")
        return self

    async def _serve(self, ready: threading.Event) -> None:
        import kmock

        self._stop = asyncio.Event()
        async with _emulator_class()() as emulator, kmock.Server(emulator) as server:
            for res in self.resources:
                emulator._kinds[(res.group, res.plural)] = res.kind
                emulator.resources[res.key] = kmock.ResourceInfo(
                    kind=res.kind,
                    namespaced=res.namespaced,
                    verbs=set(res.verbs),
                    subresources=set(res.subresources),
                    singular=res.kind.lower(),
                )
            self._emulator = emulator
            self.url = str(server.url).rstrip("/")
            ready.set()
            await self._stop.wait()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    # ---- access from the test thread ----

    def call(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(emulator)`` on the server's loop (the emulator is not thread-safe)."""
        assert self._loop is not None

        async def wrapped() -> T:
            return fn(self._emulator)

        return self.run(wrapped())

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        assert self._loop is not None
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    def objects(
        self, resource: Resource, namespace: str | None = None
    ) -> dict[str, dict[str, Any]]:
        """Live (not deleted) objects of ``resource``: name -> object (a deep copy)."""
        import copy

        def snapshot(emulator: Any) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for (res, ns, name), obj in emulator.objects.items():
                if res.plural != resource.plural or res.group != resource.group:
                    continue
                if obj.deleted or (namespace is not None and ns != namespace):
                    continue
                out[name] = copy.deepcopy(obj.raw)
            return out

        return self.call(snapshot)

    def put(self, resource: Resource, namespace: str | None, obj: Mapping[str, Any]) -> None:
        """Store ``obj`` directly (as a controller or the test's "cluster" would)."""
        import kmock

        def store(emulator: Any) -> None:
            key = (kmock.resource(resource.key), namespace, obj["metadata"]["name"])
            emulator.objects[key] = dict(obj)

        self.call(store)

    def set_log(self, namespace: str, pod: str, text: str) -> None:
        """What ``GET .../pods/<pod>/log`` returns (404 until set)."""

        def store(emulator: Any) -> None:
            emulator._logs[(namespace, pod)] = text

        self.call(store)

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """Write a kubeconfig that points at this server (no TLS, no credentials)."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kmock", "cluster": {"server": self.url}}],
            "users": [{"name": "kmock", "user": {"token": "kmock"}}],
            "contexts": [
                {
                    "name": "kmock",
                    "context": {"cluster": "kmock", "user": "kmock", "namespace": namespace},
                }
            ],
            "current-context": "kmock",
        }
        path.write_text(yaml.safe_dump(doc))
        return path


@contextmanager
def kube_server(resources: tuple[Resource, ...] = SARL_RESOURCES) -> Iterator[KubeServer]:
    """A started :class:`KubeServer`, stopped on exit."""
    server = KubeServer(resources=resources).start()
    try:
        yield server
    finally:
        server.stop()
