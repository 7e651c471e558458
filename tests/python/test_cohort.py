"""The Python module as a user drives it (pytest; meson test 'python')."""

import asyncio
import concurrent.futures
import json
import sys

import numpy as np
import pytest

import cohort


@pytest.fixture
def rt(tmp_path):
    with cohort.Runtime(cpu_workers=2, gpus=False,
                        audit_path=tmp_path / "audit.log") as r:
        yield r


def test_run_gemm_infers_shapes(rt):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 32), dtype=np.float32)
    b = rng.standard_normal((32, 16), dtype=np.float32)
    r = rt.run("gemm", [a, b])
    assert isinstance(r, cohort.Result)
    assert r.values.dtype == np.float32
    assert r.values.shape == (64 * 16,)
    np.testing.assert_allclose(r.values.reshape(64, 16), a @ b, rtol=1e-4,
                               atol=1e-4)
    assert r.device.startswith("cpu")
    assert r.indices is None
    assert r.attempts == 1
    # Results are read-only views of Cohort's memory.
    with pytest.raises(ValueError):
        r.values[0] = 1


def test_submit_returns_a_concurrent_future(rt):
    x = np.arange(1000, dtype=np.float32)
    futures = [rt.submit("reduce_sum", [x], id=i) for i in range(20)]
    done, _ = concurrent.futures.wait(futures, timeout=60)
    assert len(done) == 20
    for i, f in enumerate(futures):
        r = f.result()
        assert r.id == i
        assert r.values[0] == pytest.approx(999 * 1000 / 2, rel=1e-5)


def test_done_callbacks_chain_submissions(rt):
    # Ends reach Python in batches; a done-callback runs on Cohort's callback
    # thread and may submit the next item (and even wait for one).
    x = np.ones(64, dtype=np.float32)
    total = 2000
    ends = {}
    all_done = concurrent.futures.Future()
    sent = [0]

    def on_done(f):
        r = f.result()
        ends[r.id] = ends.get(r.id, 0) + 1
        if sent[0] < total:
            sent[0] += 1
            rt.submit("reduce_sum", [x], id=sent[0]).add_done_callback(on_done)
        elif len(ends) == total and not all_done.done():
            all_done.set_result(rt.run("nrm2", [x]).values[0])

    for _ in range(32):
        sent[0] += 1
        rt.submit("reduce_sum", [x], id=sent[0]).add_done_callback(on_done)
    assert all_done.result(timeout=60) == pytest.approx(8.0)
    assert sorted(ends) == list(range(1, total + 1))
    assert set(ends.values()) == {1}


def test_submit_async_awaits(rt):
    x = np.ones(256, dtype=np.float32)

    async def main():
        rs = await asyncio.gather(*(rt.submit_async("nrm2", [x], id=i)
                                    for i in range(8)))
        return [r.values[0] for r in rs]

    assert asyncio.run(main()) == [pytest.approx(16.0)] * 8


def test_cancelling_a_submit_async_task_cancels_its_item(tmp_path):
    # One item a thousand seconds: the second is held back for as long as
    # the test looks, so cancelling its task finds it waiting.
    config = """
      devices { cpu_workers: 1 gpus: false }
      tenant { tenant: "t" kernels: "*" devices: "*"
               rate_limit { items_per_second: 0.001 burst: 1 }
               on_limit: QUEUE queue_timeout_ms: 600000 }
      tenant { tenant: "u" kernels: "*" devices: "*" }
    """
    x = np.ones(1000, np.float32)
    with cohort.Runtime(config_text=config,
                        audit_path=tmp_path / "a.log") as rt:

        async def main():
            first = await rt.submit_async("reduce_sum", [x], tenant="t", id=1)
            assert first.values[0] == 1000
            task = rt.submit_async("reduce_sum", [x], tenant="t", id=2)
            for _ in range(500):
                await asyncio.sleep(0.01)
                if [i["state"] for i in rt.items()] == ["held"]:
                    break
            assert [(i["id"], i["state"]) for i in rt.items()] == [(2, "held")]
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The item ended before CancelledError was raised: cancelled,
            # never run.
            assert rt.items() == []
            stats = rt.stats()
            assert stats["cancelled"] == 1
            assert stats["completed"] == 1
            # A task cancelled before it ran: its item is cancelled too.
            early = rt.submit_async("reduce_sum", [x], tenant="t", id=3)
            early.cancel()
            with pytest.raises(asyncio.CancelledError):
                await early
            for _ in range(500):
                if rt.stats()["cancelled"] == 2:
                    break
                await asyncio.sleep(0.01)
            assert rt.stats()["cancelled"] == 2
            assert rt.items() == []
            # Submitted at the call: many in flight at once, awaited in any
            # order, usable with asyncio.wait.
            done, _ = await asyncio.wait(
                [rt.submit_async("reduce_sum", [x], tenant="u")
                 for _ in range(3)])
            assert [t.result().values[0] for t in done] == [1000] * 3

        asyncio.run(main())


def test_submit_async_refuses_bad_arguments_at_the_call(rt):
    x = np.ones(8, np.float32)
    with pytest.raises(TypeError):
        rt.submit_async("nrm2", [x], colour="red")
    with pytest.raises(TypeError):
        rt.submit_async("nrm2", [x], id="7")


def test_float32_inputs_are_held_not_copied(tmp_path):
    import time
    with cohort.Runtime(cpu_workers=1, gpus=False,
                        audit_path=tmp_path / "k.log") as rt:
        # The one worker is busy for a while (about a second on one core):
        # long enough that the items below still wait when they are looked
        # at, on a loaded machine too (a 512 x 512 one was not always).
        big = np.full((2048, 2048), 0.5, dtype=np.float32)
        busy = rt.submit("gemm", [big, big])
        x = np.full(4096, 2.0, dtype=np.float32)
        x64 = np.full(4096, 2.0, dtype=np.float64)
        base, base64 = sys.getrefcount(x), sys.getrefcount(x64)
        f = rt.submit("reduce_sum", [x])
        g = rt.submit("reduce_sum", [x64])
        # Cohort holds the float32 array itself (no copy) while the item is
        # in flight; the float64 one was converted, so its copy is held.
        assert sys.getrefcount(x) == base + 1
        assert sys.getrefcount(x64) == base64
        assert f.result(timeout=120).values[0] == pytest.approx(8192.0)
        assert g.result(timeout=120).values[0] == pytest.approx(8192.0)
        busy.result(timeout=120)
        for _ in range(500):
            if sys.getrefcount(x) == base:
                break
            time.sleep(0.01)
        assert sys.getrefcount(x) == base


def test_other_dtypes_and_layouts(rt):
    # float64 is converted (a copy); a strided float32 view is made
    # contiguous; integers keep their type and the kernel refuses them.
    x64 = np.arange(10, dtype=np.float64)
    assert rt.run("reduce_sum", [x64]).values[0] == pytest.approx(45.0)
    strided = np.arange(20, dtype=np.float32)[::2]
    assert rt.run("reduce_sum", [strided]).values[0] == pytest.approx(90.0)
    with pytest.raises(cohort.Error) as e:
        rt.run("reduce_sum", [np.arange(10, dtype=np.int64)])
    assert e.value.errc == "invalid_arguments"
    assert "i64" in str(e.value)
    with pytest.raises(TypeError):
        rt.run("reduce_sum", [np.array(["a", "b"])])
    with pytest.raises(cohort.Error) as e:
        rt.run("conv2d", [x64])
    assert e.value.errc == "unknown_kernel"
    assert "conv2d" in str(e.value)
    with pytest.raises(TypeError):
        rt.run("reduce_sum", [x64], colour="red")


def test_topk_returns_int64_indices(rt):
    rows = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.float32)
    query = np.array([[0, 2]], dtype=np.float32)
    r = rt.run("topk_cosine", [rows, query], top_k=1)
    assert r.indices.dtype == np.int64
    assert list(r.indices) == [1]


def test_errors_carry_the_errc_name(rt):
    x = np.ones(4, dtype=np.float32)
    with pytest.raises(cohort.Error) as e:
        rt.run("reduce_sum", [x], tenant="nobody")
    assert e.value.errc == "unknown_tenant"
    f = rt.submit("reduce_sum", [x], tenant="nobody")
    with pytest.raises(cohort.Error) as e:
        f.result(timeout=60)
    assert e.value.errc == "unknown_tenant"


def test_cancel_and_timeout(rt):
    a = np.full((256, 256), 0.5, dtype=np.float32)
    futures = [rt.submit("gemm", [a, a], id=7) for _ in range(20)]
    rt.cancel(7)
    ends = []
    for f in futures:
        try:
            f.result(timeout=120)
            ends.append("ok")
        except cohort.Error as e:
            ends.append(e.errc)
    assert len(ends) == 20
    assert set(ends) <= {"ok", "cancelled"}
    big = np.full((768, 768), 0.5, dtype=np.float32)
    with pytest.raises(cohort.Error) as e:
        rt.run("gemm", [big, big], timeout=0.001)
    assert e.value.errc == "timed_out"


def test_devices_list_their_links(tmp_path):
    config = """
      devices { cpu_workers: 0 gpus: false
                sim_gpu { name: "sim0" memory_mib: 64 streams: 1 speed: 1
                          nvlink: "sim1" }
                sim_gpu { name: "sim1" memory_mib: 64 streams: 1 speed: 1 } }
    """
    with cohort.Runtime(config_text=config,
                        audit_path=tmp_path / "a.log") as rt:
        links = {d["name"]: d["links"] for d in rt.devices()}
        assert links["sim0"] == [{"peer": "sim1", "kind": "NVLink"}]
        assert links["sim1"] == [{"peer": "sim0", "kind": "NVLink"}]


def test_views_headroom_and_dry_run(tmp_path):
    config = """
      devices { cpu_workers: 1 gpus: false
                sim_gpu { name: "sim0" memory_mib: 64 streams: 2 speed: 1 } }
      tenant { tenant: "t" kernels: "*" devices: "*"
               memory_quota_bytes: 16777216 }
    """
    with cohort.Runtime(config_text=config,
                        audit_path=tmp_path / "a.log") as rt:
        names = [d["name"] for d in rt.devices()]
        assert names == ["cpu0", "sim0"]
        assert rt.devices()[1]["simulated"]
        assert rt.devices()[1]["links"] == []
        h = rt.headroom("t")
        assert h[0]["memory_quota"] == 16 << 20
        assert h[0]["devices"][0]["device"] == "sim0"
        report = rt.dry_run([
            {"tenant": "t", "device": "sim0", "bytes": 8 << 20, "label": "a"},
            {"tenant": "t", "device": "sim0", "bytes": 8 << 20, "label": "b"},
            {"tenant": "t", "device": "sim0", "bytes": 8 << 20, "label": "c"},
        ])
        assert not report["ok"]
        assert [s["ok"] for s in report["steps"]] == [True, True, False]
        assert report["steps"][2]["error"] == "over_memory_quota"
        x = np.ones(8, dtype=np.float32)
        rt.run("reduce_sum", [x], tenant="t")
        s = rt.stats()
        assert s["completed"] == 1
        assert rt.audit_path == str(tmp_path / "a.log")
        with pytest.raises(cohort.Error) as e:
            rt.headroom("nobody")
        assert e.value.errc == "unknown_tenant"


def test_bad_configs_and_closed_runtimes(tmp_path):
    with pytest.raises(cohort.Error) as e:
        cohort.Runtime(config_text="devices { cpu_workers: ",
                       audit_path=tmp_path / "b.log")
    assert e.value.errc == "malformed_config"
    rt = cohort.Runtime(cpu_workers=1, gpus=False,
                        audit_path=tmp_path / "c.log")
    rt.close()
    with pytest.raises(cohort.Error) as e:
        rt.run("reduce_sum", [np.ones(4, dtype=np.float32)])
    assert e.value.errc == "shutting_down"
    assert cohort.version().count(".") == 2


def _signed_bundle(tmp_path, sign=True):
    """A bundle of one kernel from the test bundles' C shared object, signed
    with a new key by `cohort kernel sign`; returns (directory, public key)."""
    import hashlib
    import os
    import shutil
    import subprocess
    binary = os.environ.get("COHORT_BINARY")
    shared = os.environ.get("COHORT_ACME_KERNELS")
    if not binary or not shared:
        pytest.skip("SKIPPED: needs COHORT_BINARY and COHORT_ACME_KERNELS "
                    "(meson test sets them)")
    subprocess.run([binary, "kernel", "keygen", str(tmp_path / "k")],
                   check=True, capture_output=True)
    d = tmp_path / "bundle"
    (d / "cpu").mkdir(parents=True)
    shutil.copy(shared, d / "cpu" / "libacme.so")
    data = (d / "cpu" / "libacme.so").read_bytes()
    (d / "manifest.textproto").write_text(
        'name: "pyacme"\nversion: "1"\n'
        f'blob {{ path: "cpu/libacme.so" '
        f'sha256: "{hashlib.sha256(data).hexdigest()}" size: {len(data)} '
        'kind: CPU_SHARED_OBJECT }\n'
        'kernel { name: "py.scale_add" input { name: "x" dtype: "f64" } '
        'input { name: "y" dtype: "f64" } output { dtype: "f64" } '
        'scalar: "alpha" output_size: "x" require: "x == y" '
        'cpu_blob: "cpu/libacme.so" cpu_symbol: "acme_scale_add" }\n')
    if sign:
        subprocess.run([binary, "kernel", "sign", str(d), "--key",
                        str(tmp_path / "k.key")], check=True,
                       capture_output=True)
    return d, tmp_path / "k.pub"


def _bundle_runtime(tmp_path, pub):
    return cohort.Runtime(
        config_text=f'''
            devices {{ cpu_workers: 1 gpus: false }}
            tenant {{ tenant: "default" kernels: "*" devices: "*" }}
            kernel_bundles {{ trusted_key: "{pub}" }}''',
        audit_path=tmp_path / "audit.log")


def test_signed_bundle_kernel_takes_float64(tmp_path):
    d, pub = _signed_bundle(tmp_path)
    with _bundle_runtime(tmp_path, pub) as rt:
        assert rt.load_kernel_bundle(str(d)) == ["py.scale_add"]
        r = rt.run("py.scale_add", [np.array([1.0, 2.0]), [3, 4.5]],
                   alpha=2.0)
        assert r.values.dtype == np.float64
        assert list(r.values) == [5.0, 8.5]
        # The manifest's rule, at admission.
        with pytest.raises(cohort.Error) as e:
            rt.run("py.scale_add", [np.ones(3), np.ones(2)])
        assert e.value.errc == "invalid_arguments"
        assert "require 'x == y' does not hold" in str(e.value)


def test_tampered_bundle_is_refused(tmp_path):
    d, pub = _signed_bundle(tmp_path)
    so = d / "cpu" / "libacme.so"
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 1
    so.write_bytes(bytes(data))
    with _bundle_runtime(tmp_path, pub) as rt:
        with pytest.raises(cohort.Error) as e:
            rt.load_kernel_bundle(str(d))
        assert e.value.errc == "bundle_refused"
        assert "tampered_blob" in str(e.value)


def test_objects_stay_on_the_device_between_items(tmp_path):
    with cohort.Runtime(cpu_workers=1, simulated_gpus=2, gpus=False,
                        audit_path=tmp_path / "audit.log") as rt:
        w = np.linspace(0, 1, 10000, dtype=np.float32)
        x = np.full(10000, 2.0, np.float32)
        obj = rt.put(w, device="sim1")
        assert isinstance(obj, cohort.Object)
        assert (obj.tenant, obj.dtype, obj.size, obj.nbytes) == \
            ("default", "f32", 10000, 40000)
        listed = rt.objects()
        assert [o["id"] for o in listed] == [obj.id]
        assert listed[0]["devices"] == ["sim1"]
        assert listed[0]["host_copy"]
        np.testing.assert_array_equal(rt.get(obj), w)
        r = rt.run("dot", [obj, x])
        assert r.values[0] == pytest.approx(2 * w.sum(), rel=1e-5)
        # An output kept on its device, read by the next item there.
        kept = rt.run("axpy", [obj, x], alpha=3.0, keep_on_device=True)
        assert kept.values.size == 0
        assert isinstance(kept.object, cohort.Object)
        total = rt.run("reduce_sum", [kept.object])
        assert total.device == kept.device
        assert total.values[0] == pytest.approx((3 * w + x).sum(), rel=1e-4)
        np.testing.assert_allclose(rt.get(kept.object), 3 * w + x, rtol=1e-6)
        # Dropping the handles frees both objects.
        del obj, kept
        for _ in range(400):
            if not rt.objects():
                break
            import time
            time.sleep(0.005)
        assert rt.objects() == []


def test_object_errors(tmp_path):
    with cohort.Runtime(cpu_workers=1, simulated_gpus=1, gpus=False,
                        audit_path=tmp_path / "audit.log") as rt:
        with pytest.raises(cohort.Error) as e:
            rt.put(np.ones(4, np.float32), tenant="nobody")
        assert e.value.errc == "unknown_tenant"
        with pytest.raises(cohort.Error) as e:
            rt.put(np.ones(4, np.float32), device="sim7")
        assert e.value.errc == "unknown_device"
        with pytest.raises(cohort.Error) as e:
            rt.put(np.ones(0, np.float32))
        assert e.value.errc == "invalid_arguments"


def test_float64_is_kept_or_refused_never_rounded_away(tmp_path):
    with cohort.Runtime(cpu_workers=1, simulated_gpus=1, gpus=False,
                        audit_path=tmp_path / "audit.log") as rt:
        big = np.array([1e300, 2.0, -3.5], np.float64)
        obj = rt.put(big)
        assert (obj.dtype, obj.size, obj.nbytes) == ("f64", 3, 24)
        back = rt.get(obj)
        assert back.dtype == np.float64
        np.testing.assert_array_equal(back, big)
        # An f32 kernel's input: converted where every value fits, refused
        # where one would become inf.
        small = np.array([1.5, 2.5], np.float64)
        assert rt.run("reduce_sum", [small]).values[0] == pytest.approx(4.0)
        with pytest.raises(cohort.Error) as e:
            rt.run("reduce_sum", [big])
        assert e.value.errc == "invalid_arguments"
        assert "float32's range" in str(e.value)
        # inf and nan stay what they are.
        special = np.array([np.inf, 1.0], np.float64)
        assert np.isinf(rt.run("reduce_sum", [special]).values[0])


def test_numbers_are_checked_with_clear_errors(rt):
    x = np.ones(4, np.float32)
    for key, bad, kind in (("id", -1, ValueError), ("id", 2**64, ValueError),
                           ("id", "7", TypeError), ("id", 1.0, TypeError),
                           ("m", -3, ValueError), ("top_k", 2**32, ValueError),
                           ("gang", True, TypeError),
                           ("alpha", "2", TypeError)):
        with pytest.raises(kind) as e:
            rt.run("reduce_sum", [x], **{key: bad})
        assert key in str(e.value)
    for call in (rt.cancel, rt.item, rt.cancel_job, rt.cancel_client):
        with pytest.raises(TypeError):
            call("7")
        with pytest.raises(ValueError):
            call(-1)
    assert rt.run("reduce_sum", [x], id=np.uint64(5)).id == 5


def _wait(cond, seconds=5.0):
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def test_objects_shared_with_another_process(tmp_path):
    import os
    import signal
    import subprocess
    import cohort.client
    sock = str(tmp_path / "share.sock")
    with cohort.Runtime(cpu_workers=1, simulated_gpus=1, gpus=False,
                        audit_path=tmp_path / "audit.log",
                        share_socket=sock) as rt:
        assert rt.share_socket == sock
        w = np.arange(4096, dtype=np.float32)
        obj = rt.put(w)
        token = rt.share(obj)
        assert len(token) == 32
        # In this process: an array over sim0's memory, read-only.
        with cohort.client.attach(sock, token) as a:
            assert (a.object, a.dtype, a.size, a.device, a.memory) == \
                (obj.id, "f32", 4096, "sim0", "host")
            x = a.array()
            np.testing.assert_array_equal(x, w)
            assert not x.flags.writeable
            with pytest.raises(cohort.Error) as e:
                a.detach()  # an array still uses the memory
            assert e.value.errc == "invalid_arguments"
            del x
            assert rt.objects()[0]["attached"] == 1
        assert _wait(lambda: rt.objects()[0]["attached"] == 0)
        with pytest.raises(cohort.Error) as e:
            cohort.client.attach(sock, token, write=True)
        assert e.value.errc == "not_granted"
        # In another process, killed while attached: reclaimed.
        code = ("import sys, time, cohort.client\n"
                "a = cohort.client.attach(sys.argv[1], sys.argv[2])\n"
                "print(float(a.array().sum()), flush=True)\n"
                "time.sleep(60)\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        p = subprocess.Popen([sys.executable, "-c", code, sock, token],
                             stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert float(p.stdout.readline()) == pytest.approx(w.sum())
            assert _wait(lambda: rt.objects()[0]["attached"] == 1)
            oid = obj.id
            del obj  # the other process still holds it
            assert [o["id"] for o in rt.objects()] == [oid]
            p.send_signal(signal.SIGKILL)
            p.wait()
            assert _wait(lambda: rt.objects() == [])
        finally:
            p.kill()
            p.wait()
        # A read-write export written in place.
        obj = rt.put(np.ones(100, np.float32))
        rw = rt.share(obj, write=True)
        with cohort.client.attach(sock, rw, write=True) as a:
            y = a.array()
            y[:] = 3.0
            del y
        np.testing.assert_array_equal(rt.get(obj), np.full(100, 3.0))
        rt.unshare(rw)
        with pytest.raises(cohort.Error):
            cohort.client.attach(sock, rw)


def test_sharing_needs_a_socket(tmp_path):
    with cohort.Runtime(cpu_workers=1, simulated_gpus=1, gpus=False,
                        audit_path=tmp_path / "audit.log") as rt:
        assert rt.share_socket == ""
        obj = rt.put(np.ones(4, np.float32))
        with pytest.raises(cohort.Error) as e:
            rt.share(obj)
        assert e.value.errc == "invalid_arguments"


def test_jobs_list_describe_and_cancel(tmp_path):
    # One item a thousand seconds: the first is admitted, the others are
    # held back for as long as the test looks.
    config = """
      devices { cpu_workers: 1 gpus: false }
      tenant { tenant: "t" kernels: "*" devices: "*"
               rate_limit { items_per_second: 0.001 burst: 1 }
               on_limit: QUEUE queue_timeout_ms: 600000 }
    """
    x = np.ones(1000, np.float32)
    with cohort.Runtime(config_text=config,
                        audit_path=tmp_path / "a.log") as rt:
        first = rt.submit("reduce_sum", [x], tenant="t", id=1)
        held = [rt.submit("reduce_sum", [x], tenant="t", id=i)
                for i in (2, 3)]
        assert first.result(timeout=60).values[0] == 1000
        items = rt.items()
        assert [(i["job"], i["id"], i["state"]) for i in items] == \
            [(2, 2, "held"), (3, 3, "held")]
        assert items[0]["client"] == rt.client()
        assert items[0]["kernel"] == "reduce_sum"
        assert "over_rate_limit" in items[0]["detail"]
        assert len(rt.items("t")) == 2
        assert rt.item(1)["state"] == "done"
        assert rt.cancel_job(2) == 1
        with pytest.raises(cohort.Error) as e:
            held[0].result(timeout=60)
        assert e.value.errc == "cancelled"
        assert rt.item(2)["state"] == "cancelled"
        assert rt.cancel_tenant("t") == 1
        with pytest.raises(cohort.Error) as e:
            held[1].result(timeout=60)
        assert e.value.errc == "cancelled"
        assert rt.cancel_client(rt.client()) == 0
        assert rt.items() == []
        with pytest.raises(cohort.Error) as e:
            rt.item(999)
        assert e.value.errc == "unknown_item"
        with pytest.raises(cohort.Error) as e:
            rt.cancel_job(0)
        assert e.value.errc == "invalid_arguments"


def test_priority_orders_held_items_and_is_checked(tmp_path):
    # One item a thousand seconds: the first is admitted, the others are
    # held, listed in the order they are to be admitted.
    config = """
      devices { cpu_workers: 1 gpus: false }
      tenant { tenant: "t" kernels: "*" devices: "*"
               rate_limit { items_per_second: 0.001 burst: 1 }
               on_limit: QUEUE queue_timeout_ms: 600000 }
    """
    x = np.ones(1000, np.float32)
    with cohort.Runtime(config_text=config,
                        audit_path=tmp_path / "a.log") as rt:
        first = rt.submit("reduce_sum", [x], tenant="t", id=1)
        assert first.result(timeout=60).values[0] == 1000
        held = [rt.submit("reduce_sum", [x], tenant="t", id=i, priority=p)
                for i, p in ((2, 0), (3, 7), (4, np.int64(-2)), (5, 7))]
        items = rt.items()
        assert [(i["id"], i["priority"]) for i in items] == \
            [(3, 7), (5, 7), (2, 0), (4, -2)]
        assert rt.item(items[0]["job"])["priority"] == 7
        for bad, kind in ((1.5, TypeError), (True, TypeError),
                          ("1", TypeError), (2**31, ValueError),
                          (-2**31 - 1, ValueError)):
            with pytest.raises(kind):
                rt.submit("reduce_sum", [x], tenant="t", id=9, priority=bad)
        assert rt.cancel_tenant("t") == 4
        for f in held:
            with pytest.raises(cohort.Error):
                f.result(timeout=60)


def test_trace_records_launches_and_is_checked(tmp_path):
    with cohort.Runtime(cpu_workers=1, simulated_gpus=2, gpus=False,
                        audit_path=tmp_path / "a.log") as rt:
        for bad, kind in ((1.5, TypeError), (True, TypeError), ("9", TypeError),
                          (0, ValueError), (4_000_001, ValueError)):
            with pytest.raises(kind):
                rt.start_trace(bad)
        with pytest.raises(cohort.Error) as e:
            rt.stop_trace()
        assert e.value.errc == "invalid_transition"
        rt.start_trace(np.int64(1000))
        with pytest.raises(cohort.Error) as e:
            rt.start_trace()
        assert e.value.errc == "invalid_transition"
        x = np.ones(2048, np.float32)
        for i in range(6):
            rt.run("axpy", [x, x], alpha=2.0)
        path = tmp_path / "t.json"
        text = rt.stop_trace(path)
        assert path.read_text(encoding="utf-8") == text
        doc = json.loads(text)
        assert doc["otherData"]["producer"] == "cohort"
        launches = [e for e in doc["traceEvents"]
                    if e["ph"] == "X" and e["name"] == "axpy"]
        assert len(launches) == 6
        names = {e["args"]["name"] for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
        assert "sim0 (simulated GPU)" in names
