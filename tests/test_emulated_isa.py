"""The x86 packed kernels of every instruction set, run in the Bochs CPU emulator.

Whatever the host has, the AVX2, AVX-VNNI and AVX512-VNNI kernels run on emulated Sapphire
Rapids and Arrow Lake cores (tools/emulated_isa/run.py) and must equal the scalar reference
bit for bit, and the AVX-512 ones must fault on the core without AVX-512. The kernels the host
has natively are also run natively by the ctest suite (PackedIsa in packed_test.cc).

What it assumes of the host: x86-64 Linux, nothing about its SIMD. Bochs interprets every
instruction in software, and only the probe module's code is mapped into the guest (with its
own memcpy / memset, tools/emulated_isa/guest_libc.cc): glibc's string functions, which glibc
picks for the host CPU (EVEX builds on an AVX-512 host), never run there, and a call to them
would fault with a message naming the library."""
import platform
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 kernels")
def test_every_x86_instruction_set_equals_the_reference_in_emulation():
    run = subprocess.run([sys.executable, str(ROOT / "tools/emulated_isa/run.py"), "--build", str(ROOT / "build")],
                         capture_output=True, text=True, timeout=600)
    print(run.stdout, run.stderr)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    for line in ["sapphire_rapids: avxvnni kernels, 90 cases: all equal the reference bit for bit",
                 "sapphire_rapids: avx512vnni kernels, 90 cases: all equal the reference bit for bit",
                 "arrow_lake: avxvnni kernels, 90 cases: all equal the reference bit for bit",
                 "arrow_lake: avx512vnni kernels fault with #UD, as the model lacks them"]:
        assert line in out
