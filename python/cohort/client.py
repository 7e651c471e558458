"""Attach to objects that a Cohort runtime on this node shares
(docs/objects.md, "Sharing across processes").

    import cohort.client
    with cohort.client.attach("/run/cohort/share.sock", token) as a:
        x = a.array()          # read-only NumPy array over the object
        print(a.device, x.sum())
        del x                  # arrays go before detach

The runtime exports an object with Runtime.share(obj) (or the C++
runtime::share) and hands the token to this process by any means it likes.
The attachment holds the object until detach() (or the end of the `with`
block, or this process's exit: the runtime reclaims what a dead process
held). Objects in a simulated GPU's memory or in host memory are mapped
here; array() is a NumPy array over that memory, writable only for a
read-write export attached with write=True. Objects on a CUDA or HIP GPU
are opened through the vendor's IPC handle: `pointer` is a device pointer
of this process for the GPU's own libraries (CuPy, PyTorch, ...).
Every error is a cohort.Error.
"""

from ._cohort import Attachment

__all__ = ["Attachment", "attach"]


class _Attached:
    """An attachment, usable in a `with` block that detaches it."""

    def __init__(self, native):
        self._a = native

    def __getattr__(self, name):
        return getattr(self._a, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._a.detach()

    def __repr__(self):
        a = self._a
        state = "attached" if a.attached else "detached"
        return (f"<cohort.client.Attachment {a.id} object={a.object} "
                f"{a.dtype}[{a.size}] on {a.device} ({a.memory}, "
                f"{'read-write' if a.writable else 'read-only'}, {state})>")


def attach(socket, token, write=False):
    """Attaches to the object exported with `token` through the share
    socket at `socket`, read-write when `write` (the export must allow
    it)."""
    return _Attached(Attachment(str(socket), str(token), bool(write)))
