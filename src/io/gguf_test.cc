#include "io/gguf.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <memory>

#include "base/error.h"
#include "base/mmap.h"
#include "io/io_test_writers.h"

namespace zen {
namespace {

using namespace testing_io;

std::unique_ptr<GgufFile> open_bytes(const std::string& bytes) {
  const std::string path = temp_path("t.gguf");
  write_file(path, bytes);
  return std::make_unique<GgufFile>(path);
}

// The zen::Error message, or "" when the bytes parse. Any other exception fails the test.
std::string error_of(const std::string& bytes, const std::string& path = temp_path("e.gguf")) {
  write_file(path, bytes);
  try {
    GgufFile f(path);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

#define EXPECT_GGUF_ERROR(bytes, fragment)                                   \
  do {                                                                       \
    const std::string msg_ = error_of(bytes);                                \
    EXPECT_NE(msg_, "") << "expected an error containing: " << (fragment);   \
    EXPECT_NE(msg_.find(fragment), std::string::npos) << "message: " << msg_; \
  } while (0)

// A small file with metadata of several types and three tensors.
GgufBuilder small_model() {
  GgufBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_u32("llama.block_count", 2);
  b.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.add_strings("tokenizer.ggml.tokens", {"<unk>", "a", "bc"});
  b.add_i32s("tokenizer.ggml.token_type", {2, 1, 1});
  b.add_tensor("token_embd.weight", {8, 3});
  b.add_tensor("blk.0.ffn_down.weight", {64, 2}, kGgmlQ8_0);
  b.add_tensor("output_norm.weight", {8}, kGgmlF16);
  return b;
}

TEST(Gguf, ParsesHeaderMetadataAndTensors) {
  for (uint32_t version : {2u, 3u}) {
    GgufBuilder b = small_model();
    b.version = version;
    auto f = open_bytes(b.build());
    EXPECT_EQ(f->version(), version);
    EXPECT_EQ(f->metadata().size(), 5u);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_int("llama.block_count"), 2);
    EXPECT_FLOAT_EQ(static_cast<float>(*f->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
    EXPECT_EQ(f->get_float("llama.block_count"), 2.0);  // ints are accepted as floats
    EXPECT_FALSE(f->get_string("absent").has_value());
    const GgufValue* tokens = f->find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->type, GgufType::ARRAY);
    EXPECT_EQ(tokens->array_type, GgufType::STRING);
    EXPECT_EQ(tokens->strings, (std::vector<std::string>{"<unk>", "a", "bc"}));
    EXPECT_EQ(f->find("tokenizer.ggml.token_type")->numbers, (std::vector<double>{2, 1, 1}));
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->data_offset() % 32, 0u);

    ASSERT_EQ(f->tensors().size(), 3u);
    const TensorView& embd = f->tensors()[0];
    EXPECT_EQ(embd.name, "token_embd.weight");
    EXPECT_EQ(embd.dtype, DType::F32);
    EXPECT_EQ(embd.shape, (std::vector<int64_t>{3, 8}));  // ne reversed
    EXPECT_EQ(embd.nbytes, 3u * 8 * 4);
    const TensorView& down = f->tensors()[1];
    EXPECT_EQ(down.dtype, DType::Q8_0);
    EXPECT_EQ(down.shape, (std::vector<int64_t>{2, 64}));
    EXPECT_EQ(down.nbytes, 2u * 2 * 34);
    const TensorView& norm = f->tensors()[2];
    EXPECT_EQ(norm.dtype, DType::F16);
    EXPECT_EQ(norm.shape, (std::vector<int64_t>{8}));
    // Data pointers land on each tensor's own bytes (filled with index + 1).
    for (size_t i = 0; i < f->tensors().size(); ++i) {
      const TensorView& t = f->tensors()[i];
      EXPECT_EQ((t.data - f->tensors()[0].data) % 32, 0);
      for (size_t k = 0; k < t.nbytes; ++k) ASSERT_EQ(t.data[k], i + 1) << t.name << " byte " << k;
    }
  }
}

TEST(Gguf, AllThirteenValueTypes) {
  GgufBuilder b;
  auto scalar = [&b](const std::string& k, uint32_t type, auto v) {
    b.key(k, type);
    put_le(b.kv, v);
  };
  scalar("u8", kU8, uint8_t{200});
  scalar("i8", kI8, int8_t{-100});
  scalar("u16", kU16, uint16_t{60000});
  scalar("i16", kI16, int16_t{-30000});
  scalar("u32", kU32, uint32_t{4294967295u});
  scalar("i32", kI32, int32_t{-2000000000});
  scalar("f32", kF32, 0.5f);
  scalar("bool", kBool, uint8_t{1});
  b.add_string("string", "h\xc3\xa9llo");
  scalar("u64", kU64, uint64_t{1} << 40);
  scalar("i64", kI64, int64_t{-(int64_t{1} << 50)});
  scalar("f64", kF64, 0.125);
  b.key("arr_u16", kArray);
  put_u32(b.kv, kU16);
  put_u64(b.kv, 2);
  put_le(b.kv, uint16_t{7});
  put_le(b.kv, uint16_t{65535});
  b.key("arr_f32", kArray);
  put_u32(b.kv, kF32);
  put_u64(b.kv, 2);
  put_le(b.kv, 1.5f);
  put_le(b.kv, -2.0f);
  b.key("arr_bool", kArray);
  put_u32(b.kv, kBool);
  put_u64(b.kv, 3);
  put_u8(b.kv, 1);
  put_u8(b.kv, 0);
  put_u8(b.kv, 1);
  b.key("arr_i64", kArray);
  put_u32(b.kv, kI64);
  put_u64(b.kv, 1);
  put_le(b.kv, int64_t{-5});
  b.key("arr_empty", kArray);
  put_u32(b.kv, kString);
  put_u64(b.kv, 0);

  auto f = open_bytes(b.build());
  EXPECT_EQ(f->get_int("u8"), 200);
  EXPECT_EQ(f->get_int("i8"), -100);
  EXPECT_EQ(f->get_int("u16"), 60000);
  EXPECT_EQ(f->get_int("i16"), -30000);
  EXPECT_EQ(f->get_int("u32"), 4294967295LL);
  EXPECT_EQ(f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->get_float("f32"), 0.5);
  EXPECT_EQ(f->get_bool("bool"), true);
  EXPECT_EQ(f->get_string("string"), "h\xc3\xa9llo");
  EXPECT_EQ(f->get_int("u64"), int64_t{1} << 40);
  EXPECT_EQ(f->get_int("i64"), -(int64_t{1} << 50));
  EXPECT_EQ(f->get_float("f64"), 0.125);
  EXPECT_TRUE(f->find("u8")->is_int());
  EXPECT_FALSE(f->find("f32")->is_int());
  EXPECT_TRUE(f->find("f64")->is_float());
  EXPECT_EQ(f->find("bool")->as_number(), 1.0);
  EXPECT_EQ(f->find("i8")->as_number(), -100.0);
  EXPECT_EQ(f->find("arr_u16")->numbers, (std::vector<double>{7, 65535}));
  EXPECT_EQ(f->find("arr_f32")->numbers, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f->find("arr_bool")->numbers, (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(f->find("arr_i64")->numbers, (std::vector<double>{-5}));
  EXPECT_TRUE(f->find("arr_empty")->strings.empty());
  // Typed lookups refuse the wrong type.
  EXPECT_THROW(f->get_int("string"), Error);
  EXPECT_THROW(f->get_int("f32"), Error);
  EXPECT_THROW(f->get_string("u8"), Error);
  EXPECT_THROW(f->get_bool("u8"), Error);
  EXPECT_THROW(f->get_float("string"), Error);
  EXPECT_THROW(f->find("string")->as_number(), Error);
  EXPECT_TRUE(f->tensors().empty());
}

TEST(Gguf, CustomAlignment) {
  GgufBuilder b;
  b.alignment = 64;
  b.add_u32("general.alignment", 64);
  b.add_tensor("a", {3});  // 12 bytes; the next tensor starts at 64
  b.add_tensor("b", {5});
  auto f = open_bytes(b.build());
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->tensors()[1].data - f->tensors()[0].data, 64);

  GgufBuilder bad;
  bad.add_u32("general.alignment", 48);
  EXPECT_GGUF_ERROR(bad.build(), "general.alignment");
  GgufBuilder zero;
  zero.add_u32("general.alignment", 0);
  EXPECT_GGUF_ERROR(zero.build(), "general.alignment");
  GgufBuilder wrong_type;
  wrong_type.add_string("general.alignment", "32");
  EXPECT_GGUF_ERROR(wrong_type.build(), "general.alignment");
}

TEST(Gguf, RejectsBadMagicAndVersion) {
  std::string bytes = small_model().build();
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  EXPECT_GGUF_ERROR(bad_magic, "bad magic");
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    GgufBuilder b = small_model();
    b.version = v;
    EXPECT_GGUF_ERROR(b.build(), "version");
  }
  GgufBuilder big_endian = small_model();
  big_endian.version = 0x03000000u;
  EXPECT_GGUF_ERROR(big_endian.build(), "big-endian");
  EXPECT_GGUF_ERROR(std::string(), "truncated");
  EXPECT_GGUF_ERROR(std::string("GGUF"), "truncated");
}

TEST(Gguf, RejectsLyingCounts) {
  // Huge tensor count: refused before reserving anything.
  GgufBuilder b = small_model();
  std::string huge_tensors = b.header(uint64_t{1} << 60);
  EXPECT_GGUF_ERROR(huge_tensors, "tensors");
  // More tensors claimed than described: runs off the end.
  EXPECT_GGUF_ERROR(b.header(b.tensors.size() + 1), "truncated");
  // Huge kv count.
  GgufBuilder kvs = small_model();
  kvs.kv_count = uint64_t{1} << 62;
  EXPECT_GGUF_ERROR(kvs.build(), "metadata entries");
  // A string length far beyond the file.
  GgufBuilder s;
  s.key("k", kString);
  put_u64(s.kv, uint64_t{1} << 62);
  EXPECT_GGUF_ERROR(s.build(), "truncated");
  // A key length far beyond the file.
  GgufBuilder k;
  put_u64(k.kv, ~uint64_t{0});
  k.kv += std::string(16, 'x');
  k.kv_count = 1;
  EXPECT_GGUF_ERROR(k.build(), "truncated");
  // Array counts beyond the file, for strings and numbers.
  for (uint32_t elem : {kString, kU8, kF64}) {
    GgufBuilder a;
    a.key("arr", kArray);
    put_u32(a.kv, elem);
    put_u64(a.kv, uint64_t{1} << 61);
    EXPECT_GGUF_ERROR(a.build(), "'arr' claims");
  }
}

TEST(Gguf, RejectsBadValueTypes) {
  GgufBuilder unknown;
  unknown.key("k", 13);
  put_u32(unknown.kv, 0);
  EXPECT_GGUF_ERROR(unknown.build(), "unknown value type 13");
  GgufBuilder nested;
  nested.key("nested", kArray);
  put_u32(nested.kv, kArray);
  put_u64(nested.kv, 1);
  put_u32(nested.kv, kU8);
  put_u64(nested.kv, 0);
  EXPECT_GGUF_ERROR(nested.build(), "array of arrays");
  GgufBuilder bad_elem;
  bad_elem.key("arr", kArray);
  put_u32(bad_elem.kv, 99);
  put_u64(bad_elem.kv, 0);
  EXPECT_GGUF_ERROR(bad_elem.build(), "unknown array element type 99");
  GgufBuilder big_u64;
  big_u64.key("big", kU64);
  put_u64(big_u64.kv, ~uint64_t{0});
  EXPECT_GGUF_ERROR(big_u64.build(), "'big'");
}

TEST(Gguf, RejectsDuplicates) {
  GgufBuilder keys = small_model();
  keys.add_u32("llama.block_count", 3);
  EXPECT_GGUF_ERROR(keys.build(), "duplicate metadata key 'llama.block_count'");
  GgufBuilder names = small_model();
  names.add_tensor("output_norm.weight", {8});
  EXPECT_GGUF_ERROR(names.build(), "duplicate tensor name 'output_norm.weight'");
  GgufBuilder empty_key;
  empty_key.add_u32("", 1);
  EXPECT_GGUF_ERROR(empty_key.build(), "empty key");
}

TEST(Gguf, RejectsBadTensorInfos) {
  {
    GgufBuilder b = small_model();
    b.tensors[1].type = 16;  // IQ2_XXS: real ggml type, unsupported here
    EXPECT_GGUF_ERROR(b.build(), "tensor 'blk.0.ffn_down.weight' has unsupported ggml type id 16");
  }
  {
    GgufBuilder b = small_model();
    b.tensors[0].type = 4000000000u;
    EXPECT_GGUF_ERROR(b.build(), "'token_embd.weight' has unsupported ggml type id 4000000000");
  }
  {
    GgufBuilder b = small_model();
    b.tensors[0].ne = {};
    EXPECT_GGUF_ERROR(b.build(), "0 dimensions");
  }
  {
    GgufBuilder b;
    b.add_tensor("five", {1, 1, 1, 1, 1});
    EXPECT_GGUF_ERROR(b.build(), "5 dimensions");
  }
  {
    GgufBuilder b;
    b.add_tensor("four", {2, 1, 3, 1});
    auto f = open_bytes(b.build());
    EXPECT_EQ(f->tensors()[0].shape, (std::vector<int64_t>{1, 3, 1, 2}));
  }
  {
    GgufBuilder b = small_model();
    b.tensors[0].ne = {8, 0};
    EXPECT_GGUF_ERROR(b.build(), "invalid dimension 1 = 0");
  }
  {
    GgufBuilder b = small_model();
    b.tensors[0].ne = {~uint64_t{0}, 1};
    b.tensors[0].nbytes = 0;
    EXPECT_GGUF_ERROR(b.build(), "invalid dimension 0");
  }
  {
    GgufBuilder b;  // element count overflows 64 bits
    b.add_tensor("huge", {uint64_t{1} << 40, uint64_t{1} << 40});
    EXPECT_GGUF_ERROR(b.build(), "'huge' is too large");
  }
  {
    GgufBuilder b;
    b.add_tensor("q", {48, 2}, kGgmlQ8_0);
    b.tensors[0].nbytes = 0;
    EXPECT_GGUF_ERROR(b.build(), "innermost dimension 48, not a multiple of the block size 32");
  }
  {
    GgufBuilder b;
    b.add_tensor("k", {128}, kGgmlQ4_K);
    b.tensors[0].nbytes = 0;
    EXPECT_GGUF_ERROR(b.build(), "block size 256");
  }
  {
    GgufBuilder b;
    b.add_tensor("", {4});
    EXPECT_GGUF_ERROR(b.build(), "empty name");
  }
}

TEST(Gguf, RejectsBadOffsets) {
  {
    GgufBuilder b = small_model();
    b.tensors[2].offset += 4;  // misaligned
    EXPECT_GGUF_ERROR(b.build(), "'output_norm.weight' data offset");
  }
  {
    GgufBuilder b = small_model();
    b.tensors[1].offset = b.tensors[0].offset;  // overlaps token_embd
    EXPECT_GGUF_ERROR(b.build(), "overlap");
  }
  {
    GgufBuilder b = small_model();
    std::string bytes = b.build();
    b.tensors[2].offset = uint64_t{1} << 40;  // far outside; build() would not write data
    std::string header = b.header();
    while (header.size() % 32 != 0) header.push_back('\0');
    EXPECT_GGUF_ERROR(header + bytes.substr(header.size()), "outside the data section");
  }
  {
    GgufBuilder b = small_model();
    b.tensors[2].offset = ~uint64_t{0} - 31;  // aligned, offset + size wraps around
    std::string header = b.header();
    while (header.size() % 32 != 0) header.push_back('\0');
    EXPECT_GGUF_ERROR(header + std::string(1024, '\0'), "outside the data section");
  }
  {
    std::string bytes = small_model().build();
    EXPECT_GGUF_ERROR(bytes.substr(0, bytes.size() - 1), "outside the data section");
  }
}

// Every prefix of a valid file either parses (only the full file can) or throws zen::Error.
TEST(Gguf, EveryTruncationIsAnError) {
  const std::string bytes = small_model().build();
  const std::string path = temp_path("trunc.gguf");
  for (size_t n = 0; n < bytes.size(); ++n)
    ASSERT_NE(error_of(bytes.substr(0, n), path), "") << "prefix of " << n << " bytes parsed";
  EXPECT_EQ(error_of(bytes, path), "");
}

// Overwriting any single byte of the header with several values never crashes.
TEST(Gguf, CorruptedHeaderBytesNeverCrash) {
  GgufBuilder b = small_model();
  const std::string bytes = b.build();
  const size_t header_size = b.header().size();
  const std::string path = temp_path("corrupt.gguf");
  size_t errors = 0;
  for (size_t pos = 0; pos < header_size; ++pos) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0x7f}, uint8_t{0xff}}) {
      std::string corrupt = bytes;
      corrupt[pos] = static_cast<char>(value);
      errors += error_of(corrupt, path).empty() ? 0 : 1;
    }
  }
  EXPECT_GT(errors, 0u);  // many corruptions are detected; none crashed
  std::printf("[ info ] %zu of %zu single-byte header corruptions rejected\n", errors, 3 * header_size);
}

TEST(Gguf, LargeVocabularyArraysParseQuickly) {
  GgufBuilder b;
  std::vector<std::string> tokens(151936);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = "tok" + std::to_string(i);
  std::vector<std::string> merges(151387);
  for (size_t i = 0; i < merges.size(); ++i) merges[i] = "a" + std::to_string(i) + " b";
  b.add_strings("tokenizer.ggml.tokens", tokens);
  b.add_strings("tokenizer.ggml.merges", merges);
  b.add_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(tokens.size(), 1));
  const std::string path = temp_path("vocab.gguf");
  write_file(path, b.build());
  const auto start = std::chrono::steady_clock::now();
  GgufFile f(path);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->strings.size(), tokens.size());
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->strings.back(), tokens.back());
  EXPECT_EQ(f.find("tokenizer.ggml.merges")->strings.size(), merges.size());
  EXPECT_EQ(f.find("tokenizer.ggml.token_type")->numbers.size(), tokens.size());
  // Reported, not asserted (timings belong to benchmarks); the target is well under 0.5 s.
  std::printf("[ info ] parsed 151936 tokens + 151387 merges in %.3f s\n", seconds);
}

// Real files, installed by ./setup.sh (tests skip when absent).
const char* const kStories = ZEN_SOURCE_DIR "/../shared/data/stories260K/stories260K.gguf";
const char* const kQwen = ZEN_SOURCE_DIR "/models/default/model.gguf";
const char* const kSmol = ZEN_SOURCE_DIR "/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

const TensorView* find_tensor(const GgufFile& f, const std::string& name) {
  for (const TensorView& t : f.tensors())
    if (t.name == name) return &t;
  return nullptr;
}

TEST(GgufRealFile, Stories260K) {
  if (!file_exists(kStories)) GTEST_SKIP() << "absent: " << kStories;
  GgufFile f(kStories);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 5);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->strings.size(), 512u);
  EXPECT_EQ(f.find("tokenizer.ggml.scores")->numbers.size(), 512u);
  EXPECT_EQ(f.tensors().size(), 48u);
  const TensorView* embd = find_tensor(f, "token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dtype, DType::F32);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{512, 64}));
  const TensorView* gate = find_tensor(f, "blk.0.ffn_gate.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->shape, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(f.data_offset(), 14176u);  // as reported by gguf-py's GGUFReader
}

TEST(GgufRealFile, Qwen25CoderDefaultModel) {
  if (!file_exists(kQwen)) GTEST_SKIP() << "absent: " << kQwen;
  const auto start = std::chrono::steady_clock::now();
  GgufFile f(kQwen);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ info ] opened %s in %.3f s\n", kQwen, seconds);
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f.tensors().size(), 291u);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->strings.size(), 151936u);
  EXPECT_EQ(f.find("tokenizer.ggml.merges")->strings.size(), 151387u);
  const TensorView* embd = find_tensor(f, "token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dtype, DType::Q5_0);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{151936, 896}));
  EXPECT_EQ(find_tensor(f, "output.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(f.data_offset(), 5947776u);
}

TEST(GgufRealFile, SmolLM2Q4_1) {
  if (!file_exists(kSmol)) GTEST_SKIP() << "absent: " << kSmol;
  GgufFile f(kSmol);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.tensors().size(), 272u);
  const TensorView* down = find_tensor(f, "blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dtype, DType::Q4_1);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{576, 1536}));
}

}  // namespace
}  // namespace zen
