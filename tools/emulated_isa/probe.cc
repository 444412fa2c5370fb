// A C interface over the packed kernels for tools/emulated_isa/run.py, which runs one chosen
// instruction set's kernels inside the Bochs CPU emulator (on CPU models the host may lack)
// and checks them against the scalar reference natively.
// Everything but the kernel call runs natively: random weights, packing, activation
// quantization and the reference.
#include <cpuid.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/kernels_test_util.h"
#include "kernels/cpu/nvfp4.h"
#include "kernels/cpu/packed.h"
#include "kernels/cpu/packed_avx2.h"

namespace {

using namespace zen;
using namespace zen::kernels;

struct Probe {
  std::unique_ptr<testing::RandomMatrix> source;
  std::vector<uint8_t> codes, scales;  // NVFP4 source
  PackedMatrix packed;
  std::vector<float> x, y;
  std::vector<uint8_t> act;  // the quantized activations (problem() leaves them in shared scratch)
  avx2::PackedProblem problem;
};

std::string g_error;

DType packed_dtype(const std::string& name) {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q6_K})
    if (name == dtype_name(t)) return t;
  throw Error("zen_probe_new: no packed kernel for dtype " + name);
}

std::unique_ptr<Probe> make_probe(const std::string& dtype, int64_t rows, int64_t k, int64_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  auto p = std::make_unique<Probe>();
  if (dtype == "NVFP4") {
    p->codes.resize(static_cast<size_t>(rows * k / 2));
    for (auto& b : p->codes) b = static_cast<uint8_t>(rng());
    p->scales.resize(static_cast<size_t>(rows * k / kNvfp4GroupSize));
    std::uniform_int_distribution<int> code(0x00, 0x7E);  // every finite E4M3 code, both signs
    for (auto& c : p->scales) c = static_cast<uint8_t>(code(rng) | (rng() % 8 == 0 ? 0x80 : 0));
    p->packed = PackedMatrix::pack_nvfp4(Nvfp4Matrix{p->codes.data(), p->scales.data(), rows, k, 0.0123f}, "w");
  } else {
    const DType t = packed_dtype(dtype);
    p->source = std::make_unique<testing::RandomMatrix>(rng, t, rows, k);
    p->packed = PackedMatrix::pack(p->source->view);
  }
  p->x = testing::random_activations(rng, tokens * k);
  p->y.assign(static_cast<size_t>(tokens * rows), -1.0f);
  p->problem = p->packed.problem(p->x.data(), tokens, p->y.data());
  p->act.assign(p->problem.act, p->problem.act + p->problem.act_row_bytes * static_cast<size_t>(tokens));
  p->problem.act = p->act.data();
  return p;
}

}  // namespace

extern "C" {

// Random [rows, k] weights of `dtype` (a GGUF type name or "NVFP4") packed, with `tokens`
// quantized activation rows. nullptr on error (zen_probe_error says why).
void* zen_probe_new(const char* dtype, int64_t rows, int64_t k, int64_t tokens, uint32_t seed) {
  try {
    return make_probe(dtype, rows, k, tokens, seed).release();
  } catch (const std::exception& e) {
    g_error = e.what();
    return nullptr;
  }
}
const char* zen_probe_error() { return g_error.c_str(); }
const void* zen_probe_problem(void* h) { return &static_cast<Probe*>(h)->problem; }
int64_t zen_probe_groups(void* h) { return static_cast<Probe*>(h)->problem.n_groups; }
// packed_groups(const PackedProblem&, int64_t g0, int64_t g1) of a named instruction set.
void* zen_probe_kernel(const char* isa) { return reinterpret_cast<void*>(packed_groups_for(isa)); }

// Fills the output with NaN before a kernel runs.
void zen_probe_reset(void* h) {
  auto& y = static_cast<Probe*>(h)->y;
  std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
}

// 1 when the kernel's output equals the scalar reference bit for bit; else 0 and the first
// difference in msg.
int zen_probe_check(void* h, char* msg, size_t cap) {
  auto* p = static_cast<Probe*>(h);
  const int64_t rows = p->packed.rows(), tokens = p->problem.n_tokens;
  std::vector<float> want(p->y.size());
  p->packed.matmul_reference(p->x.data(), tokens, want.data());
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &p->y[i], sizeof(float)) != 0) {
      std::snprintf(msg, cap, "token %lld row %lld: got %.9g, reference %.9g", static_cast<long long>(i / rows),
                    static_cast<long long>(i % rows), p->y[i], want[i]);
      return 0;
    }
  return 1;
}
void zen_probe_free(void* h) { delete static_cast<Probe*>(h); }

// The CPU's leaf-7 feature words: out = {7.0 ebx, 7.0 ecx, 7.1 eax}. Run in the emulator to
// check which CPU model it is emulating.
void zen_probe_cpu_features(uint32_t* out) {
  unsigned a, b, c, d;
  __cpuid_count(7, 0, a, b, c, d);
  out[0] = b;
  out[1] = c;
  __cpuid_count(7, 1, a, b, c, d);
  out[2] = a;
}

}  // extern "C"
