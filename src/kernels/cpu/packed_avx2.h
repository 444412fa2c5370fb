// AVX2 kernels over row-interleaved weights (packed.h). Internal to kernels/cpu.
#pragma once
#include <cstddef>
#include <cstdint>

#include "io/tensor.h"

namespace zen::kernels::avx2 {

struct PackedProblem {
  DType dtype = DType::F32;  // the source dtype (selects the group layout)
  const uint8_t* weights = nullptr;
  size_t group_bytes = 0;
  int64_t n_groups = 0, n_blocks = 0;  // blocks per row
  const uint8_t* act = nullptr;        // [n_tokens][n_blocks] ActQ8, ActQ8K or ActNvfp4
  size_t act_row_bytes = 0;
  int64_t n_tokens = 0, n_rows = 0;
  float* y = nullptr;  // [n_tokens, n_rows]
  float out_scale = 1.0f;  // multiplies every finished sum (NVFP4's global scale)
};

// Computes rows 8*g0 .. 8*g1 (clipped to n_rows) for every token.
void packed_groups(const PackedProblem& p, int64_t g0, int64_t g1);

}  // namespace zen::kernels::avx2

// The same with VNNI block sums for Q8_0, Q4_0, Q5_0 and NVFP4 (packed_vnni.inc; the k-quants
// go to the AVX2 kernels), in the VEX encoding (AVX-VNNI) and the EVEX one (AVX512-VNNI + VL).
// Identical results, bit for bit.
namespace zen::kernels::avxvnni {
void packed_groups(const avx2::PackedProblem& p, int64_t g0, int64_t g1);
}
namespace zen::kernels::avx512vnni {
void packed_groups(const avx2::PackedProblem& p, int64_t g0, int64_t g1);
}

namespace zen::kernels {
using PackedGroupsFn = void (*)(const avx2::PackedProblem&, int64_t, int64_t);
// The packed kernels this CPU runs best, and their name ("avx512vnni", "avxvnni", "avx2").
// ZEN_PACKED_ISA=avx2|avxvnni|avx512vnni picks another the CPU has (comparisons, tests);
// naming one it lacks is an error.
PackedGroupsFn packed_groups_for_cpu();
const char* packed_isa_name();
// The kernels of a named instruction set whether or not this CPU has it (the emulated tests
// run them in Bochs); nullptr for an unknown name.
PackedGroupsFn packed_groups_for(const char* isa);
// Whether this CPU runs the named instruction set's kernels (false for an unknown name).
bool packed_isa_supported(const char* isa);
}  // namespace zen::kernels
