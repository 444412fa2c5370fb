#!/usr/bin/env python3
"""Runs the packed kernels of every x86 instruction set inside the Bochs CPU emulator.

The machines of this project differ (AVX2 only, or AVX-512 with VNNI), so every build of the
kernels (src/kernels/cpu/packed_vnni.inc and the AVX2 ones) is checked here on CPU models the
host may lack: bochscpu (PyPI's bochscpu-python, Bochs's CPU as a library) emulates a Sapphire
Rapids core (AVX-512 + AVX512-VNNI + AVX-VNNI) and an Arrow Lake core (AVX-VNNI, no
AVX-512). For each model, instruction set, format and shape:

  natively   random weights, packing, activation quantization (build/libzen_isa_probe.so)
  emulated   the kernel call packed_groups(problem, 0, n_groups), the process's data and the
             probe's code mapped 1:1 into the guest, so pointers need no translation
  natively   the result against the scalar reference, bit for bit

The guest's CPUID is checked first, so the emulated model is the one claimed. On Arrow Lake
the AVX512-VNNI kernels must fault with #UD: the emulator rejects what the model lacks.
The result does not depend on the host CPU: only the probe module's code is mapped into the
guest, and it carries its own memcpy / memset (guest_libc.cc), since glibc's are chosen for the
host (EVEX builds on an AVX-512 host, which Arrow Lake refuses). A kernel that still calls out
faults with a page fault that names the library.

    .venv/bin/python tools/emulated_isa/run.py [--build build]
Exit status 0 when every case matches. Each model runs in its own process (Bochs reads its
CPU model once), preloaded with build/libzen_bochs_shim.so (see there why).
"""
import argparse
import ctypes
import mmap
import os
import re
import subprocess
import sys

# Bochs cpudb indices (its enum order) and what CPUID must report for each.
MODELS = {
    "sapphire_rapids": {"index": 30, "isas": ["avx2", "avxvnni", "avx512vnni"], "lacks": []},
    "arrow_lake": {"index": 31, "isas": ["avx2", "avxvnni"], "lacks": ["avx512vnni"]},
}
# The CPUID features each instruction set's kernels need (packed.cc's cpu_has).
ISA_FEATURES = {"avx2": ["avx2"], "avxvnni": ["avxvnni"], "avx512vnni": ["avx512f", "avx512vl", "avx512vnni"]}
FEATURE_BITS = {  # (word of zen_probe_cpu_features, bit)
    "avx2": (0, 5),
    "avx512f": (0, 16),
    "avx512vl": (0, 31),
    "avx512vnni": (1, 11),
    "avxvnni": (2, 4),
}
# Formats with VNNI kernels, then the k-quants (which those kernels hand to the AVX2 ones).
CASES = [
    (dtype, rows, k, tokens)
    for dtype, k in [("Q8_0", 608), ("Q4_0", 608), ("Q5_0", 608), ("NVFP4", 608), ("Q4_K", 768), ("Q6_K", 768)]
    for rows in (13, 21, 45)  # a partial group; 3 groups (AVX-512 pairs two, the third runs alone); several
    for tokens in (1, 2, 3, 9, 70)  # decode; the few-token path; tiles of 4 plus one; over a 64-token tile
]
PAGE = 4096
INVALID_OPCODE, GENERAL_PROTECTION, PAGE_FAULT = 6, 13, 14
PROBE = "libzen_isa_probe.so"  # the only module whose code is mapped into the guest


def host_mappings():
    """(start, end, perms, name) of each mapping of this process."""
    for line in open("/proc/self/maps"):
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)", line)
        yield int(m[1], 16), int(m[2], 16), m[3], m[4].strip()


def where(address):
    """The host mapping that holds an address, for fault messages."""
    for lo, hi, _, name in host_mappings():
        if lo <= address < hi:
            return f"{address:#x} in {os.path.basename(name) or 'an anonymous mapping'}"
    return f"{address:#x}"


class Guest:
    """Bochs CPUs in long mode at CPL 3 whose page tables map the host's pages 1:1."""

    def __init__(self, bochscpu):
        self.b = bochscpu
        # Functions return into a page of HLT; at CPL 3 that raises #GP there, which ends a run.
        self.stop_page = mmap.mmap(-1, PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self.stop_page.write(b"\xf4" * PAGE)
        self.stop = ctypes.addressof(ctypes.c_char.from_buffer(self.stop_page))
        self.stack = ctypes.create_string_buffer(1 << 20)
        self.pml4 = 0x1000

    def _map_process(self):
        """Every readable mapping of this process at its own address (guest VA = host VA), but
        code only of the probe module: a call into the host's libraries (glibc picks its string
        functions for the host CPU) would make the result depend on the host, so it faults."""
        # The table owns the host pages of the page tables: it must outlive every run.
        self.table = table = self.b.memory.PageMapLevel4Table()
        gpa = 0x100000
        for lo, hi, perms, name in host_mappings():
            if "r" not in perms or name in ("[vvar]", "[vsyscall]", "[vdso]"):
                continue
            if "x" in perms and os.path.basename(name) != PROBE:
                continue
            for va in range(lo, hi, PAGE):
                self.b.memory.page_insert(gpa, va)
                table.insert(va, gpa, 1)
                gpa += PAGE
        for hva, table_gpa in table.commit(self.pml4):
            self.b.memory.page_insert(table_gpa, hva)

    def call(self, fn, *args):
        """Runs fn(*args) (integer/pointer arguments) on a fresh CPU; returns the exception
        vector that ended it and rip there."""
        b = self.b
        session = b.Session()

        def missing_page(gpa):
            raise RuntimeError(f"guest touched unmapped physical page {gpa:#x}")

        session.missing_page_handler = missing_page
        self._map_process()
        state = b.State()
        b.cpu.set_long_mode(state)
        state.cr4 = state.cr4 | (1 << 9) | (1 << 10) | (1 << 18)  # OSFXSR, OSXMMEXCPT, OSXSAVE
        state.xcr0 = 0xE7  # x87, SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM state enabled
        state.cr3 = self.pml4
        state.mxcsr = 0x1F80  # SIMD floating-point exceptions masked, as every OS starts threads
        top = (ctypes.addressof(self.stack) + len(self.stack) - 64) & ~63
        ctypes.c_uint64.from_address(top - 8).value = self.stop  # the return address
        state.rsp = top - 8  # as after a call: rsp + 8 is 16-byte aligned
        state.rip = fn
        for reg, value in zip(("rdi", "rsi", "rdx", "rcx", "r8", "r9"), args):
            setattr(state, reg, value)
        code = b.Segment()
        code.present, code.selector, code.base, code.limit, code.attr = True, 0x33, 0, 0xFFFFFFFF, 0x22FB
        data = b.Segment()
        data.present, data.selector, data.base, data.limit, data.attr = True, 0x2B, 0, 0xFFFFFFFF, 0xCF3
        state.cs = code
        state.ds = state.ss = state.es = state.fs = state.gs = data
        session.cpu.state = state
        outcome = {}

        def on_exception(sess, cpu_id, vector, error_code):
            outcome.setdefault("vector", vector)
            sess.stop()

        hook = b.Hook()
        hook.exception = on_exception
        session.run([hook])
        return outcome.get("vector"), session.cpu.state.rip

    def returned(self, vector, rip):
        """Whether a run ended at the HLT it returned to (Bochs reports rip past it)."""
        return vector == GENERAL_PROTECTION and self.stop <= rip <= self.stop + 1


def run_model(name, build):
    import bochscpu
    import bochscpu.cpu
    import bochscpu.memory

    spec = MODELS[name]
    probe = ctypes.CDLL(os.path.join(build, PROBE))
    probe.zen_probe_new.restype = ctypes.c_void_p
    probe.zen_probe_new.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint32]
    probe.zen_probe_error.restype = ctypes.c_char_p
    probe.zen_probe_problem.restype = ctypes.c_void_p
    probe.zen_probe_problem.argtypes = [ctypes.c_void_p]
    probe.zen_probe_groups.restype = ctypes.c_int64
    probe.zen_probe_groups.argtypes = [ctypes.c_void_p]
    probe.zen_probe_kernel.restype = ctypes.c_void_p
    probe.zen_probe_kernel.argtypes = [ctypes.c_char_p]
    probe.zen_probe_check.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    probe.zen_probe_free.argtypes = [ctypes.c_void_p]
    probe.zen_probe_reset.argtypes = [ctypes.c_void_p]

    # Everything the guest touches is allocated before the address space is mapped.
    cases = []
    for i, (dtype, rows, k, tokens) in enumerate(CASES):
        handle = probe.zen_probe_new(dtype.encode(), rows, k, tokens, 1000 + i)
        if not handle:
            sys.exit(f"{name}: zen_probe_new({dtype}): {probe.zen_probe_error().decode()}")
        cases.append((dtype, rows, k, tokens, handle))
    features = (ctypes.c_uint32 * 3)()
    message = ctypes.create_string_buffer(256)
    guest = Guest(bochscpu)

    vector, rip = guest.call(ctypes.cast(probe.zen_probe_cpu_features, ctypes.c_void_p).value, ctypes.addressof(features))
    if not guest.returned(vector, rip):
        sys.exit(f"{name}: CPUID probe ended with exception {vector} at {where(rip)}")
    has = {f: bool(features[w] >> bit & 1) for f, (w, bit) in FEATURE_BITS.items()}
    present = all(has[f] for isa in spec["isas"] for f in ISA_FEATURES[isa])
    absent = all(not all(has[f] for f in ISA_FEATURES[isa]) for isa in spec["lacks"])
    if not (present and absent):
        sys.exit(f"{name}: the emulated CPU is not the model asked for (CPUID: {has}); is ZEN_BOCHS_MODEL right?")
    print(f"{name}: CPUID {', '.join(f for f in has if has[f])}")

    failures = 0
    for isa in spec["isas"]:
        failed_before = failures
        kernel = probe.zen_probe_kernel(isa.encode())
        for dtype, rows, k, tokens, handle in cases:
            probe.zen_probe_reset(handle)  # a kernel that writes nothing must not pass on the last one's output
            vector, rip = guest.call(kernel, probe.zen_probe_problem(handle), 0, probe.zen_probe_groups(handle))
            label = f"{name} {isa:10s} {dtype:5s} rows {rows:2d} k {k} tokens {tokens:2d}"
            if not guest.returned(vector, rip):
                left = " (the kernel called code outside the probe module)" if vector == PAGE_FAULT else ""
                print(f"FAIL {label}: exception {vector} at {where(rip)}{left}")
                failures += 1
            elif not probe.zen_probe_check(handle, message, len(message)):
                print(f"FAIL {label}: {message.value.decode()}")
                failures += 1
        failed = failures - failed_before
        print(f"{name}: {isa} kernels, {len(cases)} cases:", f"{failed} FAILED" if failed else "all equal the reference bit for bit")
    for isa in spec["lacks"]:
        dtype, rows, k, tokens, handle = cases[0]
        vector, rip = guest.call(probe.zen_probe_kernel(isa.encode()), probe.zen_probe_problem(handle), 0,
                                 probe.zen_probe_groups(handle))
        if vector != INVALID_OPCODE:
            print(f"FAIL {name}: {isa} kernels should fault with #UD on this model; got exception {vector}")
            failures += 1
        else:
            print(f"{name}: {isa} kernels fault with #UD, as the model lacks them")
    for case in cases:
        probe.zen_probe_free(case[4])
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    parser.add_argument("--model", choices=sorted(MODELS), help="run one model in this process (internal)")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    if args.model:
        sys.exit(1 if run_model(args.model, build) else 0)
    shim = os.path.join(build, "libzen_bochs_shim.so")
    for path in (shim, os.path.join(build, PROBE)):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: build the project first")
    status = 0
    for name, spec in MODELS.items():
        env = dict(os.environ, LD_PRELOAD=shim, ZEN_BOCHS_MODEL=str(spec["index"]))
        result = subprocess.run([sys.executable, __file__, "--build", build, "--model", name], env=env)
        status |= result.returncode != 0
    print("emulated instruction sets:", "FAILED" if status else "all cases equal the reference")
    sys.exit(status)


if __name__ == "__main__":
    main()
