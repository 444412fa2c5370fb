// Quant kernels: dequantizers and quantizers against gguf-py fixtures (bit-exact), scalar dot
// products against f64 dots of the dequantized rows, SIMD paths against the scalar ones.
#include "kernels/cpu/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/cpu/kernels_test_util.h"

namespace zen::kernels {
namespace {

using testing::all_weight_dtypes;
using testing::random_activations;
using testing::random_weights;
using testing::ScalarOnly;

// --- fixtures from tools/make_quant_fixtures.py -----------------------------------------------

struct Fixture {
  std::string name;
  int64_t n = 0;
  std::vector<float> input;  // what gguf-py quantized (empty when the blocks were built directly)
  std::vector<uint8_t> raw;
  std::vector<float> dequantized;
};

template <typename T>
void read_pod(std::ifstream& f, T* v, size_t count = 1) {
  f.read(reinterpret_cast<char*>(v), static_cast<std::streamsize>(sizeof(T) * count));
  if (!f) throw Error("truncated fixture");
}

Fixture load_fixture(const std::string& file) {
  const std::string path = std::string(ZEN_SOURCE_DIR) + "/tests/fixtures/quant/" + file;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("missing fixture " + path + " (run tools/make_quant_fixtures.py)");
  char magic[4];
  read_pod(f, magic, 4);
  if (std::memcmp(magic, "ZQF1", 4) != 0) throw Error("bad fixture magic in " + path);
  Fixture fx;
  uint32_t name_len;
  read_pod(f, &name_len);
  fx.name.resize(name_len);
  read_pod(f, fx.name.data(), name_len);
  uint64_t n, n_input, raw_len;
  read_pod(f, &n);
  read_pod(f, &n_input);
  fx.n = static_cast<int64_t>(n);
  fx.input.resize(n_input);
  read_pod(f, fx.input.data(), n_input);
  read_pod(f, &raw_len);
  fx.raw.resize(raw_len);
  read_pod(f, fx.raw.data(), raw_len);
  fx.dequantized.resize(n);
  read_pod(f, fx.dequantized.data(), n);
  return fx;
}

void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (f32_to_bits(got[i]) != f32_to_bits(want[i]) && ++mismatches <= 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " want " << want[i];
  }
  EXPECT_EQ(mismatches, 0) << what;
}

struct DequantCase {
  const char* file;
  DType dtype;
};

class DequantFixtureTest : public ::testing::TestWithParam<DequantCase> {};

TEST_P(DequantFixtureTest, MatchesGgufPyExactly) {
  const DequantCase c = GetParam();
  const Fixture fx = load_fixture(c.file);
  EXPECT_EQ(fx.name, dtype_name(c.dtype));
  ASSERT_EQ(fx.raw.size(), dtype_row_bytes(c.dtype, fx.n));
  std::vector<float> out(static_cast<size_t>(fx.n));
  ref::dequantize_row(c.dtype, fx.raw.data(), out.data(), fx.n);
  expect_bits_equal(out, fx.dequantized, std::string("ref::dequantize_row ") + c.file);
  std::fill(out.begin(), out.end(), 0.0f);
  dequantize_row(c.dtype, fx.raw.data(), out.data(), fx.n);
  expect_bits_equal(out, fx.dequantized, std::string("dequantize_row ") + c.file);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, DequantFixtureTest,
    ::testing::Values(DequantCase{"q4_0.bin", DType::Q4_0}, DequantCase{"q4_1.bin", DType::Q4_1},
                      DequantCase{"q5_0.bin", DType::Q5_0}, DequantCase{"q5_1.bin", DType::Q5_1},
                      DequantCase{"q8_0.bin", DType::Q8_0}, DequantCase{"q4_k.bin", DType::Q4_K},
                      DequantCase{"q5_k.bin", DType::Q5_K}, DequantCase{"q6_k.bin", DType::Q6_K},
                      DequantCase{"f16.bin", DType::F16}, DequantCase{"bf16.bin", DType::BF16}),
    [](const auto& info) { return std::string(dtype_name(info.param.dtype)); });

TEST(QuantFixture, WeightQ8_0QuantizerMatchesGgufPy) {
  const Fixture fx = load_fixture("q8_0.bin");
  ASSERT_EQ(fx.input.size(), static_cast<size_t>(fx.n));
  std::vector<BlockQ8_0> blocks(static_cast<size_t>(fx.n / 32));
  ref::quantize_weight_row_q8_0(fx.input.data(), blocks.data(), fx.n);
  ASSERT_EQ(fx.raw.size(), blocks.size() * sizeof(BlockQ8_0));
  EXPECT_EQ(std::memcmp(blocks.data(), fx.raw.data(), fx.raw.size()), 0);
}

// The activation quantizer rounds ties to even and scales by 127/amax (llama.cpp's x86 path);
// gguf-py (ggml's reference) rounds ties away from zero and scales by 1/d. Same d; quants
// equal but for rare off-by-one ties.
TEST(QuantFixture, ActivationQ8_0AgreesWithGgufPyUpToTies) {
  const Fixture fx = load_fixture("q8_0.bin");
  for (bool simd : {false, true}) {
    const bool was = simd_enabled();
    set_simd_enabled(simd);
    std::vector<BlockQ8_0> blocks(static_cast<size_t>(fx.n / 32));
    quantize_activation(DType::Q8_0, fx.input.data(), blocks.data(), fx.n);
    set_simd_enabled(was);
    const auto* want = reinterpret_cast<const BlockQ8_0*>(fx.raw.data());
    int differing = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      EXPECT_EQ(blocks[b].d, want[b].d) << "block " << b;
      for (int j = 0; j < 32; ++j) {
        EXPECT_LE(std::abs(blocks[b].qs[j] - want[b].qs[j]), 1) << "block " << b << " quant " << j;
        differing += blocks[b].qs[j] != want[b].qs[j];
      }
    }
    EXPECT_LE(differing, fx.n / 50) << "simd " << simd;
  }
}

TEST(QuantFixture, Q8_KQuantizerMatchesGgmlReference) {
  const Fixture fx = load_fixture("q8_k.bin");
  ASSERT_EQ(fx.input.size(), static_cast<size_t>(fx.n));
  std::vector<BlockQ8_K> blocks(static_cast<size_t>(fx.n / 256));
  ASSERT_EQ(fx.raw.size(), blocks.size() * sizeof(BlockQ8_K));
  ref::quantize_row_q8_K(fx.input.data(), blocks.data(), fx.n);
  EXPECT_EQ(std::memcmp(blocks.data(), fx.raw.data(), fx.raw.size()), 0);
  if (cpu_has_simd()) {
    std::vector<BlockQ8_K> fast(blocks.size());
    quantize_activation(DType::Q4_K, fx.input.data(), fast.data(), fx.n);
    EXPECT_EQ(std::memcmp(fast.data(), fx.raw.data(), fx.raw.size()), 0);
  }
}

// --- what ggml's own CPU backend computes (ggml_cpu.bin, from llama-cpp-python's libggml) ---

std::map<std::string, std::vector<uint8_t>> load_blobs(const std::string& file) {
  const std::string path = std::string(ZEN_SOURCE_DIR) + "/tests/fixtures/quant/" + file;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("missing fixture " + path + " (run tools/make_quant_fixtures.py)");
  char magic[4];
  read_pod(f, magic, 4);
  if (std::memcmp(magic, "ZQB1", 4) != 0) throw Error("bad fixture magic in " + path);
  uint32_t count;
  read_pod(f, &count);
  std::map<std::string, std::vector<uint8_t>> blobs;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t name_len;
    read_pod(f, &name_len);
    std::string name(name_len, '\0');
    read_pod(f, name.data(), name_len);
    uint64_t size;
    read_pod(f, &size);
    std::vector<uint8_t> data(size);
    read_pod(f, data.data(), size);
    blobs[name] = std::move(data);
  }
  return blobs;
}

template <typename T>
const T* blob_as(const std::map<std::string, std::vector<uint8_t>>& blobs, const std::string& name, size_t count) {
  const auto it = blobs.find(name);
  if (it == blobs.end()) throw Error("fixture has no " + name);
  if (it->second.size() != count * sizeof(T)) throw Error("fixture " + name + " has the wrong size");
  return reinterpret_cast<const T*>(it->second.data());
}

TEST(GgmlCpu, ActivationQuantizersMatchGgmlBytes) {
  const auto blobs = load_blobs("ggml_cpu.bin");
  struct Case {
    const char* fn;
    DType weight;  // a weight dtype whose activation format this is
  };
  for (const Case c : {Case{"quantize_row_q8_0", DType::Q8_0}, Case{"quantize_row_q8_1", DType::Q4_1},
                       Case{"quantize_row_q8_K", DType::Q6_K}}) {
    const int64_t n = 4096;
    const float* x = blob_as<float>(blobs, std::string(c.fn) + ".input", n);
    const size_t bytes = activation_row_bytes(c.weight, n);
    const uint8_t* want = blob_as<uint8_t>(blobs, std::string(c.fn) + ".ggml", bytes);
    for (bool simd : {false, true}) {
      const bool was = simd_enabled();
      set_simd_enabled(simd);
      std::vector<uint8_t> got(bytes);
      quantize_activation(c.weight, x, got.data(), n);
      set_simd_enabled(was);
      size_t first_diff = bytes;
      for (size_t i = 0; i < bytes && first_diff == bytes; ++i)
        if (got[i] != want[i]) first_diff = i;
      EXPECT_EQ(first_diff, bytes) << c.fn << (simd ? " (simd)" : " (scalar)") << ": first differing byte";
    }
  }
}

TEST(GgmlCpu, DotProductsMatchGgml) {
  const auto blobs = load_blobs("ggml_cpu.bin");
  const uint32_t* shape = blob_as<uint32_t>(blobs, "shape", 3);
  const int64_t k = shape[0], rows = shape[1], tokens = shape[2];
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K}) {
    const std::string name = dtype_name(t);
    const size_t w_row = dtype_row_bytes(t, k), a_row = activation_row_bytes(t, k);
    const auto* w = blob_as<uint8_t>(blobs, name + ".weights", w_row * static_cast<size_t>(rows));
    const auto* x = blob_as<float>(blobs, name + ".x", static_cast<size_t>(k * tokens));
    const auto* act = blob_as<uint8_t>(blobs, name + ".act", a_row * static_cast<size_t>(tokens));
    const auto* dots = blob_as<float>(blobs, name + ".dots", static_cast<size_t>(rows * tokens));
    for (int64_t tok = 0; tok < tokens; ++tok) {
      // Our quantizer gives ggml's activation bytes ...
      std::vector<uint8_t> mine(a_row);
      quantize_activation(t, x + tok * k, mine.data(), k);
      EXPECT_EQ(std::memcmp(mine.data(), act + tok * a_row, a_row), 0) << name << " token " << tok;
      for (int64_t r = 0; r < rows; ++r) {
        // ... and our dot products agree with ggml's to f32 rounding (summation order differs).
        const uint8_t* wr = w + r * w_row;
        std::vector<float> wf(static_cast<size_t>(k));
        ref::dequantize_row(t, wr, wf.data(), k);
        double mag = 0.0;
        for (int64_t i = 0; i < k; ++i) mag += std::fabs(wf[static_cast<size_t>(i)] * x[tok * k + i]);
        const float want = dots[r * tokens + tok];
        EXPECT_NEAR(vec_dot(t, wr, act + tok * a_row, k), want, 1e-5 * mag) << name << " row " << r;
        EXPECT_NEAR(ref::vec_dot(t, wr, act + tok * a_row, k), want, 1e-5 * mag) << name << " row " << r;
      }
    }
  }
}

// --- quantizers: SIMD bytes == scalar bytes ------------------------------------------------

TEST(Quantize, SimdQuantizersMatchScalarBytes) {
  if (!cpu_has_simd()) GTEST_SKIP() << "no SIMD path for this CPU: only the scalar path exists";
  std::mt19937 rng(7);
  for (DType t : {DType::Q8_0, DType::Q4_1, DType::Q6_K}) {  // Q8_0, Q8_1, Q8_K activations
    for (int64_t k : {256, 768, 4864}) {
      std::vector<float> x = random_activations(rng, k);
      for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i - 16) * 0.5f;  // ties
      std::vector<uint8_t> scalar, fast;
      {
        ScalarOnly off;
        scalar = testing::prepare_activation(t, x.data(), k);
      }
      fast = testing::prepare_activation(t, x.data(), k);
      EXPECT_EQ(scalar, fast) << activation_format_name(activation_format(t)) << " k=" << k;
    }
  }
}

TEST(Quantize, Q8_1SumIsScaledQuantSum) {
  std::mt19937 rng(3);
  const std::vector<float> x = random_activations(rng, 256);
  std::vector<BlockQ8_1> b(8);
  ref::quantize_row_q8_1(x.data(), b.data(), 256);
  for (const auto& blk : b) {
    int sum = 0;
    for (int8_t q : blk.qs) sum += q;
    // s = f16(d * sum) with the f32 d (before its own f16 rounding): equal up to f16 precision.
    EXPECT_NEAR(f16_to_f32(blk.s), f16_to_f32(blk.d) * static_cast<float>(sum),
                std::fabs(f16_to_f32(blk.d) * static_cast<float>(sum)) * 2e-3f + 1e-6f);
  }
}

// --- dot products ------------------------------------------------------------------------------

// f64 dot of a quantized activation row, dequantized, with a dequantized weight row.
std::vector<double> dequantize_activation(DType weight, const uint8_t* act, int64_t k) {
  std::vector<double> out(static_cast<size_t>(k));
  switch (activation_format(weight)) {
    case ActivationFormat::F32:
      for (int64_t i = 0; i < k; ++i) out[static_cast<size_t>(i)] = reinterpret_cast<const float*>(act)[i];
      break;
    case ActivationFormat::Q8_0:
      for (int64_t i = 0; i < k; ++i) {
        const auto& b = reinterpret_cast<const BlockQ8_0*>(act)[i / 32];
        out[static_cast<size_t>(i)] = static_cast<double>(f16_to_f32(b.d)) * b.qs[i % 32];
      }
      break;
    case ActivationFormat::Q8_1:
      for (int64_t i = 0; i < k; ++i) {
        const auto& b = reinterpret_cast<const BlockQ8_1*>(act)[i / 32];
        out[static_cast<size_t>(i)] = static_cast<double>(f16_to_f32(b.d)) * b.qs[i % 32];
      }
      break;
    case ActivationFormat::Q8_K:
      for (int64_t i = 0; i < k; ++i) {
        const auto& b = reinterpret_cast<const BlockQ8_K*>(act)[i / 256];
        out[static_cast<size_t>(i)] = static_cast<double>(b.d) * b.qs[i % 256];
      }
      break;
  }
  return out;
}

// Allowed error of the dot product: f32 rounding relative to the magnitude of the terms, plus
// for Q4_1/Q5_1 the f16 rounding of the activation block sums s (the min term m * s).
double tolerance(DType t, const std::vector<float>& w, const std::vector<double>& a, const uint8_t* act) {
  double mag = 0.0;
  for (size_t i = 0; i < w.size(); ++i) mag += std::fabs(w[i] * a[i]);
  double tol = 2e-6 * mag + 1e-30;
  if (activation_format(t) == ActivationFormat::Q8_1) {
    double s_err = 0.0;
    const auto* b = reinterpret_cast<const BlockQ8_1*>(act);
    for (size_t i = 0; i < w.size() / 32; ++i) {
      // |m| <= max |w| of the block (roughly); f16 relative error 2^-11.
      double m = 0.0;
      for (size_t j = 0; j < 32; ++j) m = std::max(m, std::fabs(static_cast<double>(w[32 * i + j])));
      s_err += m * std::fabs(f16_to_f32(b[i].s)) * 1e-3;
    }
    tol += s_err;
  }
  return tol;
}

int64_t suitable_k(DType t, int variant) {
  if (dtype_block_elems(t) == 256) return 256 * (variant == 0 ? 1 : variant == 1 ? 3 : 19);
  if (dtype_block_elems(t) == 32) return 32 * (variant == 0 ? 1 : variant == 1 ? 7 : 28);
  return variant == 0 ? 37 : variant == 1 ? 224 : 896;
}

TEST(VecDot, ScalarMatchesF64DotOfDequantizedRows) {
  std::mt19937 rng(11);
  for (DType t : all_weight_dtypes()) {
    for (int variant = 0; variant < 3; ++variant) {
      const int64_t k = suitable_k(t, variant);
      const auto w = random_weights(rng, t, 1, k);
      const auto x = random_activations(rng, k);
      std::vector<uint8_t> act(activation_row_bytes(t, k));
      {
        ScalarOnly off;
        quantize_activation(t, x.data(), act.data(), k);
      }
      std::vector<float> wf(static_cast<size_t>(k));
      ref::dequantize_row(t, w.data(), wf.data(), k);
      const std::vector<double> a = dequantize_activation(t, act.data(), k);
      double want = 0.0;
      for (int64_t i = 0; i < k; ++i) want += static_cast<double>(wf[static_cast<size_t>(i)]) * a[static_cast<size_t>(i)];
      const float got = ref::vec_dot(t, w.data(), act.data(), k);
      EXPECT_NEAR(got, want, tolerance(t, wf, a, act.data())) << dtype_name(t) << " k=" << k;
    }
  }
}

TEST(VecDot, SimdMatchesScalar) {
  if (!cpu_has_simd()) GTEST_SKIP() << "no SIMD path for this CPU: only the scalar path exists";
  std::mt19937 rng(12);
  for (DType t : all_weight_dtypes()) {
    for (int variant = 0; variant < 3; ++variant) {
      const int64_t k = suitable_k(t, variant);
      for (int rep = 0; rep < 20; ++rep) {
        const auto w = random_weights(rng, t, 1, k);
        const auto x = random_activations(rng, k);
        const auto act = testing::prepare_activation(t, x.data(), k);
        std::vector<float> wf(static_cast<size_t>(k));
        ref::dequantize_row(t, w.data(), wf.data(), k);
        const std::vector<double> a = dequantize_activation(t, act.data(), k);
        const float want = ref::vec_dot(t, w.data(), act.data(), k);
        const float got = vec_dot(t, w.data(), act.data(), k);
        EXPECT_NEAR(got, want, tolerance(t, wf, a, act.data())) << dtype_name(t) << " k=" << k << " rep " << rep;
      }
    }
  }
}

// The NEON block-format kernels sum each block in exact integers and then repeat the scalar
// reference's float operations, so on aarch64 they equal it bit for bit (with and without the
// dot-product extension: tools/test_aarch64.sh runs this under both).
TEST(VecDot, NeonBlockFormatsEqualScalarBitForBit) {
#if !defined(__aarch64__)
  GTEST_SKIP() << "aarch64 only";
#endif
  std::cout << "[ info ] kernels in use: " << simd_path_name() << "\n";
  std::mt19937 rng(14);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K}) {
    for (int variant = 0; variant < 3; ++variant) {
      const int64_t k = suitable_k(t, variant);
      for (int rep = 0; rep < 10; ++rep) {
        const auto w = random_weights(rng, t, 1, k);
        const auto x = random_activations(rng, k);
        const auto act = testing::prepare_activation(t, x.data(), k);
        const float want = ref::vec_dot(t, w.data(), act.data(), k);
        const float got = vec_dot(t, w.data(), act.data(), k);
        EXPECT_EQ(f32_to_bits(got), f32_to_bits(want)) << dtype_name(t) << " k=" << k << ": " << got << " vs " << want;
      }
    }
  }
}

// Extreme quants: every weight quant at its largest magnitude, activations at +-127.
TEST(VecDot, SimdHandlesExtremeQuants) {
  if (!cpu_has_simd()) GTEST_SKIP() << "no SIMD path for this CPU";
  std::mt19937 rng(13);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K}) {
    const int64_t k = dtype_block_elems(t) == 256 ? 512 : 256;
    for (uint8_t fill : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x80}}) {
      auto w = random_weights(rng, t, 1, k);
      // Overwrite quant bytes (everything but the f16 scales) with the fill pattern.
      const size_t bb = dtype_block_bytes(t);
      for (size_t off = 0; off < w.size(); off += bb) {
        size_t q0 = 0, q1 = bb;
        switch (t) {
          case DType::Q8_0: case DType::Q4_0: case DType::Q5_0: q0 = 2; break;
          case DType::Q4_1: case DType::Q5_1: q0 = 4; break;
          case DType::Q4_K: case DType::Q5_K: q0 = 4; break;
          case DType::Q6_K: q1 = 192; break;  // ql, qh; keep scales and d
          default: break;
        }
        std::memset(&w[off + q0], fill, q1 - q0);
      }
      std::vector<float> x(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(i)] = (i % 3 == 0) ? -1.0f : 1.0f;
      const auto act = testing::prepare_activation(t, x.data(), k);
      std::vector<float> wf(static_cast<size_t>(k));
      ref::dequantize_row(t, w.data(), wf.data(), k);
      const std::vector<double> a = dequantize_activation(t, act.data(), k);
      EXPECT_NEAR(vec_dot(t, w.data(), act.data(), k), ref::vec_dot(t, w.data(), act.data(), k),
                  tolerance(t, wf, a, act.data()))
          << dtype_name(t) << " fill " << int(fill);
    }
  }
}

TEST(VecDot, RejectsUnsupportedDtypesAndRaggedRows) {
  const std::vector<uint8_t> buf(4096);
  EXPECT_THROW(vec_dot(DType::I32, buf.data(), buf.data(), 8), Error);
  EXPECT_THROW(vec_dot(DType::Q4_K, buf.data(), buf.data(), 100), Error);
  EXPECT_THROW(vec_dot_fn(DType::F8_E4M3), Error);
  EXPECT_THROW(activation_format(DType::I64), Error);
  EXPECT_THROW(dequantize_row(DType::Q8_0, buf.data(), nullptr, 33), Error);
  EXPECT_FALSE(is_supported_weight_dtype(DType::U8));
  EXPECT_TRUE(is_supported_weight_dtype(DType::Q6_K));
}

TEST(VecDot, ActivationFormatsMirrorGgml) {
  EXPECT_EQ(activation_format(DType::Q4_0), ActivationFormat::Q8_0);
  EXPECT_EQ(activation_format(DType::Q5_0), ActivationFormat::Q8_0);
  EXPECT_EQ(activation_format(DType::Q8_0), ActivationFormat::Q8_0);
  EXPECT_EQ(activation_format(DType::Q4_1), ActivationFormat::Q8_1);
  EXPECT_EQ(activation_format(DType::Q5_1), ActivationFormat::Q8_1);
  EXPECT_EQ(activation_format(DType::Q4_K), ActivationFormat::Q8_K);
  EXPECT_EQ(activation_format(DType::Q6_K), ActivationFormat::Q8_K);
  EXPECT_EQ(activation_format(DType::BF16), ActivationFormat::F32);
  EXPECT_EQ(activation_row_bytes(DType::Q6_K, 512), 2 * sizeof(BlockQ8_K));
  EXPECT_EQ(activation_row_bytes(DType::Q5_1, 64), 2 * sizeof(BlockQ8_1));
  EXPECT_EQ(activation_row_bytes(DType::F16, 5), 20u);
}

}  // namespace
}  // namespace zen::kernels
