"""Cohort from Python: an actor runtime for fleets of GPUs.

    import numpy as np, cohort
    with cohort.Runtime(cpu_workers=2, gpus=False) as rt:
        a = np.ones((64, 32), np.float32)
        b = np.ones((32, 16), np.float32)
        r = rt.run("gemm", [a, b])            # shapes give m, n, k
        print(r.values.reshape(64, 16), r.device)
        f = rt.submit("dot", [x, y])          # concurrent.futures.Future
        r = await rt.submit_async("nrm2", [x])  # inside a coroutine

Inputs are NumPy arrays (or anything np.asarray takes). float32 arrays in
C order go in without a copy and are kept alive until Cohort is done with
them; for a float32 input, float64 and float16 arrays are converted to
float32 (a copy; a value beyond float32's range is refused). Results
are read-only float32 arrays over Cohort's own memory (topk_cosine's row
indices are int64). Every error is a cohort.Error whose `errc` attribute is
Cohort's error name ("cancelled", "unknown_tenant", ...).
"""

import asyncio
import atexit
import concurrent.futures
import operator
import weakref

from ._cohort import Error, NativeRuntime, Object, Result, version

__all__ = ["Error", "Object", "Result", "Runtime", "version", "KERNELS"]

KERNELS = ("axpy", "dot", "nrm2", "reduce_sum", "inclusive_scan", "gemv",
           "gemm", "topk_cosine")

# Runtimes still open, stopped at exit before the interpreter goes away
# (their threads may still hold NumPy arrays).
_open = weakref.WeakSet()


@atexit.register
def _close_all():
    for rt in list(_open):
        rt.close()


def _shape(a):
    return getattr(a, "shape", None)


def _infer(kernel, inputs, args):
    """Fills m, n, k from 2-D inputs where the caller left them out."""
    if kernel == "gemm" and len(inputs) == 2:
        sa, sb = _shape(inputs[0]), _shape(inputs[1])
        if sa is not None and sb is not None and len(sa) == 2 and len(sb) == 2:
            args.setdefault("m", sa[0])
            args.setdefault("k", sa[1])
            args.setdefault("n", sb[1])
    elif kernel == "gemv" and inputs:
        sa = _shape(inputs[0])
        if sa is not None and len(sa) == 2:
            args.setdefault("m", sa[0])
            args.setdefault("n", sa[1])
    elif kernel == "topk_cosine" and inputs:
        sa = _shape(inputs[0])
        if sa is not None and len(sa) == 2:
            args.setdefault("m", sa[0])
            args.setdefault("n", sa[1])
    return args


def _int(value, name):
    # An int or anything with __index__ (NumPy integers); bool, str and float
    # are refused.
    if isinstance(value, bool):
        raise TypeError("%s must be an int, not bool" % name)
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("%s must be an int, not %s" %
                        (name, type(value).__name__)) from None


def _count(value, name, bits=64):
    # A non-negative integer argument of `bits` bits.
    value = _int(value, name)
    if not 0 <= value < 2**bits:
        raise ValueError("%s %d is out of range: 0 to %d" %
                         (name, value, 2**bits - 1))
    return value


def _real(value, name):
    # A number (int, float, NumPy scalar); str and bytes are refused.
    if isinstance(value, (str, bytes, bool)):
        raise TypeError("%s must be a number, not %s" %
                        (name, type(value).__name__))
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError("%s must be a number, not %s" %
                        (name, type(value).__name__)) from None


def _priority(value):
    # An item's priority is an int32 (docs/jobs.md).
    value = _int(value, "priority")
    if not -2**31 <= value < 2**31:
        raise ValueError("priority %d is out of range: it is an int32 "
                         "(-2147483648 to 2147483647)" % value)
    return value


class Runtime:
    """A running Cohort instance (its own actors, devices and audit log).

    Without a config: `cpu_workers` (None: one per core), `simulated_gpus`,
    `gpus` (the machine's CUDA and HIP GPUs) and tenant "default" granted
    everything. With `config_file` or `config_text` (a text-format
    cohort.pb.RuntimeConfig) the config says which devices and tenants
    there are. `audit_path` overrides where the audit log goes.
    Thread-safe. Use it as a context manager, or call close().
    """

    def __init__(self, cpu_workers=None, simulated_gpus=0, gpus=True,
                 audit_path="", config_file="", config_text="",
                 share_socket=""):
        self._rt = NativeRuntime(cpu_workers, simulated_gpus, gpus,
                                 str(audit_path), str(config_file),
                                 config_text, str(share_socket))
        _open.add(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        rt = getattr(self, "_rt", None)
        if rt is not None:
            rt.close()

    @staticmethod
    def _args(kernel, inputs, kw):
        inputs = list(inputs)
        args = _infer(kernel, inputs, dict(kw))
        return inputs, (_count(args.pop("id", 0), "id"),
                        str(args.pop("tenant", "default")),
                        _real(args.pop("alpha", 1.0), "alpha"),
                        _count(args.pop("m", 0), "m"),
                        _count(args.pop("n", 0), "n"),
                        _count(args.pop("k", 0), "k"),
                        _count(args.pop("top_k", 0), "top_k", 32),
                        _count(args.pop("gang", 0), "gang", 32),
                        bool(args.pop("keep_on_device", False)),
                        _priority(args.pop("priority", 0))), args

    def submit(self, kernel, inputs, **kw):
        """Submits one item; returns a concurrent.futures.Future that gets
        its Result, or a cohort.Error. Keywords: id, tenant, alpha, m, n, k,
        top_k, gang (m, n and k come from 2-D inputs when left out),
        keep_on_device (the output stays on the device as an Object, the
        Result's `object`; docs/objects.md) and priority (an int32: higher
        goes ahead of the tenant's waiting items of lower priority;
        docs/jobs.md). An input may be an Object.
        Cancel it with cancel(id), not Future.cancel()."""
        inputs, fixed, rest = self._args(kernel, inputs, kw)
        if rest:
            raise TypeError("submit: unknown keyword(s) " + ", ".join(sorted(rest)))
        return self._submit(kernel, inputs, fixed)[0]

    def _submit(self, kernel, inputs, fixed):
        future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        ticket = self._rt.submit(future, kernel, inputs, *fixed)
        return future, ticket

    def submit_async(self, kernel, inputs, **kw):
        """As submit(), for the running asyncio loop: submits the item now
        and returns an asyncio Task that gets its Result, or cohort.Error.
        Cancelling it (Task.cancel(), asyncio.wait_for's timeout) cancels
        the item: one still waiting never runs, one running finishes on its
        device and its result is dropped; CancelledError is raised once the
        item has ended (for a running one, after its launch)."""
        inputs, fixed, rest = self._args(kernel, inputs, kw)
        if rest:
            raise TypeError("submit_async: unknown keyword(s) " +
                            ", ".join(sorted(rest)))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = asyncio.get_event_loop()
        future, ticket = self._submit(kernel, inputs, fixed)
        task = loop.create_task(self._until_end(future, ticket))

        def on_done(t):
            # Cancelled before it ran its first step: the item is cancelled
            # all the same.
            if t.cancelled() and not future.done():
                self._cancel_ticket(ticket)

        task.add_done_callback(on_done)
        return task

    def _cancel_ticket(self, ticket):
        try:
            self._rt.cancel_ticket(ticket)
        except Error:
            pass  # closed: the item ended with shutting_down

    async def _until_end(self, future, ticket):
        ended = asyncio.wrap_future(future)
        try:
            # Shielded: a cancel of this task reaches the item (below), not
            # the future its end fills.
            return await asyncio.shield(ended)
        except asyncio.CancelledError:
            if not future.done():
                self._cancel_ticket(ticket)
                try:
                    await ended
                except BaseException:  # its end is dropped; a second
                    pass               # cancel stops the wait
            raise

    def run(self, kernel, inputs, timeout=None, **kw):
        """Submits one item and waits for its Result (at most `timeout`
        seconds: then the item is cancelled and cohort.Error has errc
        "timed_out"); raises cohort.Error when it fails."""
        inputs, fixed, rest = self._args(kernel, inputs, kw)
        if rest:
            raise TypeError("run: unknown keyword(s) " + ", ".join(sorted(rest)))
        if timeout is not None:
            timeout = float(timeout)
        return self._rt.run(kernel, inputs, *fixed, timeout)

    def cancel(self, id):
        """Cancels every item with this id still in flight: one waiting ends
        with errc "cancelled" and never runs; one running finishes and then
        ends with "cancelled". Exactly one end either way."""
        self._rt.cancel(_count(id, "id"))

    def items(self, tenant=""):
        """The live items of the node (of `tenant`), as dicts: job, id,
        client, tenant, kernel, state (held, queued, placed, running),
        device, age_ms, attempts, cancelling, priority, detail
        (docs/jobs.md)."""
        return self._rt.items(str(tenant))

    def item(self, job):
        """Item `job`, live or among the last 1,024 that ended (state done,
        failed or cancelled), as a dict; errc "unknown_item" otherwise."""
        return self._rt.item(_count(job, "job"))

    def cancel_job(self, job):
        """Cancels item `job`; returns 1, or 0 when it ended already. Each
        cancel is audited; the item still ends once, with "cancelled"."""
        return self._rt.cancel_job(_count(job, "job"))

    def cancel_tenant(self, tenant):
        """Cancels every live item of `tenant`; returns how many."""
        return self._rt.cancel_tenant(str(tenant))

    def cancel_client(self, client):
        """Cancels every live item of client `client` (a number, as items
        list it; this runtime's own is `client()`); returns how many."""
        return self._rt.cancel_client(_count(client, "client"))

    def start_trace(self, max_events=1_000_000):
        """Starts recording a trace of this runtime's work (docs/tracing.md):
        each item's wait, each launch on its device's stream, failovers,
        failures and device events, at most `max_events` (1 to 4,000,000)
        of them. errc "invalid_transition" while one is being recorded."""
        max_events = _int(max_events, "max_events")
        if not 1 <= max_events <= 4_000_000:
            raise ValueError("max_events must be 1 to 4,000,000, not %d"
                             % max_events)
        self._rt.start_trace(max_events)

    def stop_trace(self, path=None):
        """Stops the trace and returns it as Chrome trace event JSON (a
        str, which Perfetto opens); with `path`, also writes it there (a
        path that cannot be opened raises OSError and leaves the trace
        recording)."""
        if path is None:
            return self._rt.stop_trace()
        # Opened first: a path that cannot be written leaves the trace
        # recording, not lost.
        with open(path, "w", encoding="utf-8") as f:
            text = self._rt.stop_trace()
            f.write(text)
        return text

    def client(self):
        """The client number of this runtime's own items."""
        return self._rt.client()

    def devices(self):
        """The devices, as dicts (name, kind, model, simulated, memory_bytes,
        streams, numa_node, links: the GPUs it reaches directly, as dicts of
        peer and kind, "NVLink", "xGMI" or "PCIe P2P")."""
        return self._rt.devices()

    def stats(self):
        """Counters: admitted, rejected, completed, failed, cancelled,
        fallbacks, per_device."""
        return self._rt.stats()

    def headroom(self, tenant=""):
        """What each tenant (or `tenant`) may still use, per device."""
        return self._rt.headroom(tenant)

    def load_kernel_bundle(self, dir):
        """Loads the signed kernel bundle in directory `dir` under the trust
        settings of the runtime's config (kernel_bundles) and returns its
        kernels' names, which `run` and `submit` then take. Raises Error
        (errc "bundle_refused") when the bundle is refused."""
        return self._rt.load_kernel_bundle(str(dir))

    def put(self, array, tenant="default", device=""):
        """Keeps `array` in a device's memory as an object of `tenant`
        (docs/objects.md), on `device` or the granted device with the least
        work, and returns its cohort.Object handle. Items take the handle
        as an input and read the object where it is; the object is freed
        once no handle and no item holds it."""
        return self._rt.put(str(tenant), array, str(device))

    def get(self, obj):
        """A host copy of object `obj`, as a read-only array."""
        return self._rt.get(obj)

    def objects(self, tenant=""):
        """The live objects (of `tenant`), as dicts: id, tenant, dtype, size,
        bytes, devices, host_copy, handles, readers, attached, exports,
        age_ms."""
        return self._rt.objects(str(tenant))

    def share(self, obj, write=False, uid=-1, max_attached=0):
        """Exports object `obj` to other processes of this node and returns
        the token they attach with (cohort.client.attach) through
        `share_socket`: read-write when `write`, for user `uid` (-1: this
        process's user), at most `max_attached` attachments at once (0: no
        limit). Needs a runtime started with share_socket."""
        return self._rt.share(obj, bool(write), int(uid), int(max_attached))

    def unshare(self, token):
        """Revokes an export: no new attaches with `token`."""
        self._rt.unshare(str(token))

    @property
    def share_socket(self):
        """The share socket's path ("" when this runtime does not share)."""
        return self._rt.share_socket()

    def dry_run(self, steps, from_now=False):
        """A dry run of allocation steps (dicts: tenant, device, bytes,
        kernel, label, or free) against the grants and quotas."""
        return self._rt.dry_run(list(steps), from_now)

    @property
    def audit_path(self):
        return self._rt.audit_path()

    def stop(self):
        """Ends every admitted item (its result or "shutting_down") and
        stops admitting."""
        self._rt.stop()

    def close(self):
        """stop(), then frees the runtime."""
        self._rt.close()
        _open.discard(self)
