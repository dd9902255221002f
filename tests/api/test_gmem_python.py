"""unittest tests of python/gmem. Run by tests/api/python_test.sh in three settings, told by
GMEM_TEST_MODE: 'nolib' (no driver), 'fake' (fake driver, no shim), 'shim' (libgmem.so
preloaded over the fake driver), 'shim_client' (the same, but ctypes opens libgmem_client.so,
which must forward to the shim); FAKE_CUDA_TOTAL_BYTES=512M in all but the first."""

import os
import re
import unittest

import gmem
from gmem import chunking

MODE = os.environ.get("GMEM_TEST_MODE", "nolib")
SHIM = MODE in ("shim", "shim_client")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Planning(unittest.TestCase):
    def test_same_plan_as_cpp(self):  # numbers from tests/api/chunking_test.cpp
        p = gmem.plan_chunks(1000, 10, available_bytes=1000)
        self.assertEqual((p.budget_bytes, p.chunk_count, p.chunk_items, p.last_chunk_items),
                         (700, 15, 67, 1000 - 14 * 67))
        self.assertTrue(p.fits)
        p = gmem.plan_chunks(100, 10, available_bytes=1000, fixed_bytes=300)
        self.assertEqual(p.chunk_items, 34)
        p = gmem.plan_chunks(100, 10, available_bytes=1000, fixed_bytes=300, min_chunk_items=50)
        self.assertFalse(p.fits)
        self.assertEqual((p.chunk_items, p.chunk_count), (50, 2))

    def test_covers_everything(self):
        for total in (1, 7, 99, 1000, 4097):
            for avail in (1, 100, 999, 100000):
                p = gmem.plan_chunks(total, 3, available_bytes=avail)
                self.assertEqual((p.chunk_count - 1) * p.chunk_items + p.last_chunk_items, total)


class Chunked(unittest.TestCase):
    def run_chunked(self, total, fn, **kw):
        hits = [0] * total

        def body(b, e):
            rc = fn(b, e)
            if rc in (None, 0):
                for i in range(b, e):
                    hits[i] += 1
            return rc

        res = gmem.chunked(total, 1, body, available_bytes=1000, empty_cache=lambda: None, **kw)
        return res, hits

    def test_oom_above_threshold_raised(self):
        class OutOfMemoryError(RuntimeError):  # like torch.cuda.OutOfMemoryError
            pass

        def fn(b, e):
            if e - b > 13:
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB")

        res, hits = self.run_chunked(100, fn)
        self.assertEqual(hits, [1] * 100)
        self.assertGreaterEqual(res.halvings, 3)

    def test_oom_code_and_growth(self):
        state = {"squeezed": True, "sizes": []}

        def fn(b, e):
            if state["squeezed"] and e - b > 10:
                return 2
            state["squeezed"] = False
            state["sizes"].append(e - b)
            return 0

        res, hits = self.run_chunked(1000, fn, grow_after=2)
        self.assertEqual(hits, [1] * 1000)
        self.assertGreaterEqual(res.growths, 2)
        self.assertGreater(state["sizes"][-1], state["sizes"][0])

    def test_intermittent(self):
        calls = [0]

        def fn(b, e):
            calls[0] += 1
            if calls[0] % 3 == 0:
                raise MemoryError()

        res, hits = self.run_chunked(5000, fn, grow_after=2)
        self.assertEqual(hits, [1] * 5000)
        self.assertGreater(res.ooms, 0)

    def test_oom_at_size_one(self):
        def fn(b, e):
            if b <= 37 < e:
                raise MemoryError()

        with self.assertRaises(gmem.ChunkError) as cm:
            self.run_chunked(64, fn)
        self.assertEqual((cm.exception.begin, cm.exception.end), (37, 38))
        self.assertEqual(cm.exception.reason, "out_of_memory_at_minimum")
        self.assertIn("[37, 38)", str(cm.exception))
        self.assertEqual(cm.exception.result.items_done, 37)

    def test_other_errors_pass_through(self):
        def fn(b, e):
            raise KeyError("bug")

        with self.assertRaises(KeyError):
            self.run_chunked(10, fn)
        with self.assertRaises(gmem.ChunkError) as cm:
            self.run_chunked(10, lambda b, e: 700)
        self.assertEqual(cm.exception.reason, "failed")

    def test_progress(self):
        seen = []
        gmem.chunked(10, 1, lambda b, e: None, available_bytes=5,
                     on_progress=lambda *a: seen.append(a))
        self.assertEqual(len(seen), 4)
        self.assertEqual(seen[-1][:2], (10, 10))


class Streaming(unittest.TestCase):
    def test_generator_of_unknown_length(self):
        produced = [0]

        def gen():
            for i in range(10000):
                produced[0] += 1
                yield i

        consumed = [0]
        ahead = [0]

        def fn(items, first):
            self.assertEqual(first, consumed[0])
            self.assertEqual(items[0], first)
            consumed[0] += len(items)
            ahead[0] = max(ahead[0], produced[0] - consumed[0])

        res = gmem.chunked_iter(gen(), 100, fn, available_bytes=10240,
                                empty_cache=lambda: None)
        self.assertEqual(consumed[0], 10000)
        self.assertEqual(res.items_done, 10000)
        self.assertLessEqual(ahead[0], 71)

    def test_cost_function_and_oom(self):
        seen = []

        def fn(items, first):
            if len(items) > 20:
                raise MemoryError()
            seen.extend(items)

        gmem.chunked_iter(iter(range(777)), lambda x: 1, fn, available_bytes=1000,
                          empty_cache=lambda: None)
        self.assertEqual(seen, list(range(777)))

    def test_measured_cost(self):
        dev = {"live": 5000, "peak": 5000}

        def reset():
            dev["peak"] = dev["live"]
            return True

        sizes = []

        def fn(items, first):
            dev["peak"] = max(dev["peak"], dev["live"] + 1000 * len(items))
            if first >= 16:
                sizes.append(len(items))

        res = gmem.chunked_iter(iter(range(3000)), gmem.MEASURED, fn, sample_items=16,
                                available_bytes=100000, read_usage=lambda: (dev["live"], dev["peak"]),
                                reset_peak=reset, empty_cache=lambda: None)
        self.assertEqual(res.items_done, 3000)
        self.assertEqual(res.bytes_per_item, 1000)  # same numbers as the C++ test
        self.assertEqual(max(sizes), 70)

    def test_empty(self):
        res = gmem.chunked_iter(iter(()), 8, lambda items, first: None, available_bytes=100)
        self.assertEqual(res.items_done, 0)


class Binding(unittest.TestCase):
    def test_stats_fields_match_header(self):
        with open(os.path.join(REPO, "include", "gmem", "gmem.h")) as f:
            text = f.read()
        block = text[text.index("#define GMEM_STATS_FIELDS"):text.index("clang-format on")]
        self.assertEqual(tuple(re.findall(r"X\((\w+)\)", block)), gmem.STATS_FIELDS)

    def test_oom_classifier(self):
        self.assertTrue(gmem.is_out_of_memory(MemoryError()))
        self.assertTrue(gmem.is_out_of_memory(RuntimeError("CUDA error: out of memory")))
        self.assertTrue(gmem.is_out_of_memory(
            RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")))
        self.assertFalse(gmem.is_out_of_memory(ValueError("bad shape")))


@unittest.skipUnless(MODE in ("fake", "shim", "shim_client"), "needs the fake driver")
class ApiOverFakeDriver(unittest.TestCase):
    def test_available(self):
        self.assertEqual(gmem.available(), SHIM)
        if MODE == "shim_client":
            self.assertTrue(gmem._binding.lib()._name.endswith("libgmem_client.so"))

    def test_stats(self):
        s = gmem.stats()
        self.assertEqual(s.device_total_bytes, 512 << 20)
        self.assertEqual(s.from_pool, SHIM)
        self.assertEqual(s.version, 4)
        self.assertGreater(s.allocatable_bytes, 0)

    def test_limit_and_can_allocate(self):
        gmem.set_limit(32 << 20)
        try:
            self.assertLessEqual(gmem.allocatable_bytes(), 32 << 20)
            self.assertTrue(gmem.can_allocate(1 << 20))
            self.assertFalse(gmem.can_allocate(1 << 40))
            p = gmem.plan_chunks(1000, 1 << 20)  # 1 MiB items, 32 MiB limit
            self.assertLessEqual(p.bytes_per_chunk, int(0.7 * (32 << 20)))
        finally:
            gmem.set_limit(0)

    def test_mark_peak_cache_report(self):
        self.assertEqual(gmem.mark("python test"), SHIM)
        self.assertEqual(gmem.reset_peak(), SHIM)
        gmem.empty_cache()
        report = gmem.memory_report()
        self.assertIn("gmem memory report", report)
        self.assertIn("pool figures from libgmem.so" if SHIM
                      else "libgmem.so not preloaded", report)


@unittest.skipUnless(MODE == "nolib", "no-driver setting")
class ApiWithoutDriver(unittest.TestCase):
    def test_errors_name_the_cause(self):
        self.assertFalse(gmem.available())
        with self.assertRaises(gmem.GmemError) as cm:
            gmem.stats()
        self.assertEqual(cm.exception.name, "GMEM_ERROR_NO_DRIVER")
        self.assertIn("libcuda.so.1", gmem.memory_report())
        p = gmem.plan_chunks(10, 1)  # availability unknown: one chunk, retries adapt
        self.assertFalse(p.fits)
        self.assertEqual(p.chunk_count, 1)


if __name__ == "__main__":
    unittest.main()
