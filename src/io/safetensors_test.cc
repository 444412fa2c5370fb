#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "base/error.h"
#include "io/io_test_writers.h"

namespace zen {
namespace {

using namespace testing_io;

std::unique_ptr<SafetensorsFile> open_bytes(const std::string& bytes) {
  const std::string path = temp_path("t.safetensors");
  write_file(path, bytes);
  return std::make_unique<SafetensorsFile>(path);
}

// The zen::Error message, or "" when the bytes parse. Any other exception fails the test.
std::string error_of(const std::string& bytes, const std::string& path = temp_path("e.safetensors")) {
  write_file(path, bytes);
  try {
    SafetensorsFile f(path);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

#define EXPECT_ST_ERROR(bytes, fragment)                                     \
  do {                                                                       \
    const std::string msg_ = error_of(bytes);                                \
    EXPECT_NE(msg_, "") << "expected an error containing: " << (fragment);   \
    EXPECT_NE(msg_.find(fragment), std::string::npos) << "message: " << msg_; \
  } while (0)

SafetensorsBuilder small_model() {
  SafetensorsBuilder b;
  b.add("model.embed_tokens.weight", "BF16", {3, 4}, 2);
  b.add("model.norm.weight", "F32", {4}, 4);
  b.add("lm_head.weight_scale", "F8_E4M3", {2, 2}, 1);
  b.metadata = {{"format", "pt"}};
  return b;
}

// A one-tensor header with a raw JSON entry, data of `data_bytes` zeros.
std::string one_tensor(const std::string& entry_json, size_t data_bytes) {
  return safetensors_bytes("{\"w\":" + entry_json + "}", std::string(data_bytes, '\0'));
}

TEST(Safetensors, ParsesTensorsAndMetadata) {
  auto f = open_bytes(small_model().build());
  ASSERT_EQ(f->tensors().size(), 3u);
  // File order (by data offset).
  const TensorView& embd = f->tensors()[0];
  EXPECT_EQ(embd.name, "model.embed_tokens.weight");
  EXPECT_EQ(embd.dtype, DType::BF16);
  EXPECT_EQ(embd.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(embd.nbytes, 24u);
  EXPECT_EQ(f->tensors()[1].dtype, DType::F32);
  EXPECT_EQ(f->tensors()[2].dtype, DType::F8_E4M3);
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const TensorView& t = f->tensors()[i];
    for (size_t k = 0; k < t.nbytes; ++k) ASSERT_EQ(t.data[k], i + 1) << t.name;
  }
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(Safetensors, AllDtypes) {
  SafetensorsBuilder b;
  const std::pair<const char*, DType> dtypes[] = {
      {"F32", DType::F32},   {"F16", DType::F16},         {"BF16", DType::BF16},
      {"F64", DType::F64},   {"I8", DType::I8},           {"I16", DType::I16},
      {"I32", DType::I32},   {"I64", DType::I64},         {"U8", DType::U8},
      {"BOOL", DType::BOOL}, {"F8_E4M3", DType::F8_E4M3}, {"F8_E5M2", DType::F8_E5M2},
  };
  for (const auto& [name, dtype] : dtypes) b.add(name, name, {3}, dtype_block_bytes(dtype));
  auto f = open_bytes(b.build());
  ASSERT_EQ(f->tensors().size(), 12u);
  for (const TensorView& t : f->tensors()) EXPECT_STREQ(dtype_name(t.dtype), t.name.c_str());
}

TEST(Safetensors, ScalarsEmptyTensorsAndPadding) {
  SafetensorsBuilder b;
  b.add("scalar", "F32", {}, 4);
  b.add("empty", "F32", {0, 5}, 4);
  b.add("vec", "I64", {2}, 8);
  // Writers may pad the header with spaces to align the data.
  std::string header = b.header_json() + "       ";
  auto f = open_bytes(safetensors_bytes(header, b.data()));
  ASSERT_EQ(f->tensors().size(), 3u);
  std::map<std::string, const TensorView*> by_name;
  for (const TensorView& t : f->tensors()) by_name[t.name] = &t;
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_EQ(by_name["scalar"]->shape, std::vector<int64_t>{});
  EXPECT_EQ(by_name["scalar"]->numel(), 1);
  EXPECT_EQ(by_name["scalar"]->nbytes, 4u);
  EXPECT_EQ(by_name["empty"]->nbytes, 0u);
  EXPECT_EQ(by_name["vec"]->nbytes, 16u);
  auto no_tensors = open_bytes(safetensors_bytes("{}", ""));
  EXPECT_TRUE(no_tensors->tensors().empty());
}

TEST(Safetensors, RejectsBadHeaderLength) {
  EXPECT_ST_ERROR(std::string(), "shorter than the header length");
  EXPECT_ST_ERROR(std::string("\x02\0\0", 3), "shorter than the header length");
  std::string too_long;
  put_u64(too_long, 1000);
  too_long += "{}";
  EXPECT_ST_ERROR(too_long, "exceeds the file size");
  std::string huge;
  put_u64(huge, 200ull * 1000 * 1000);
  huge += "{}";
  EXPECT_ST_ERROR(huge, "100 MB");
  std::string max;
  put_u64(max, ~uint64_t{0});
  EXPECT_ST_ERROR(max, "100 MB");
}

TEST(Safetensors, RejectsBadJson) {
  EXPECT_ST_ERROR(safetensors_bytes("{\"w\": {", ""), "not valid JSON");
  EXPECT_ST_ERROR(safetensors_bytes("", ""), "not valid JSON");
  EXPECT_ST_ERROR(safetensors_bytes("{} trailing", ""), "not valid JSON");
  EXPECT_ST_ERROR(safetensors_bytes("[1, 2]", ""), "not a JSON object");
  EXPECT_ST_ERROR(safetensors_bytes("{\"w\": 3}", ""), "'w' header entry is not an object");
  EXPECT_ST_ERROR(safetensors_bytes(std::string(100000, '['), ""), "not valid JSON");
  EXPECT_ST_ERROR(safetensors_bytes(std::string("{\"a\0\": 1}", 10), ""), "not valid JSON");
}

TEST(Safetensors, RejectsBadEntries) {
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F4","shape":[2],"data_offsets":[0,1]})", 1),
                  "tensor 'w' has unsupported dtype 'F4'");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"U16","shape":[2],"data_offsets":[0,4]})", 4),
                  "tensor 'w' has unsupported dtype 'U16'");
  EXPECT_ST_ERROR(one_tensor(R"({"shape":[2],"data_offsets":[0,8]})", 8), "'dtype'");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})", 8), "'dtype'");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","data_offsets":[0,8]})", 8), "'shape'");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[2]})", 8), "data_offsets");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})", 8), "data_offsets");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", 8),
                  "invalid shape entry -2");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})", 8),
                  "invalid shape entry");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})", 8),
                  "invalid shape entry");
  EXPECT_ST_ERROR(
      one_tensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})", 8),
      "too large");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,"8"]})", 8),
                  "invalid data_offsets");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[-1,7]})", 8),
                  "invalid data_offsets");
}

TEST(Safetensors, RejectsBadOffsets) {
  // Past the end of the data buffer.
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 7),
                  "outside the data buffer");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]})", 8),
                  "outside the data buffer");
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})", 8),
                  "outside the data buffer");
  // Size inconsistent with dtype x shape.
  EXPECT_ST_ERROR(one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,6]})", 8),
                  "span 6 bytes but F32 x [2] needs 8");
  // Overlap.
  EXPECT_ST_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                    std::string(12, '\0')),
                  "overlap");
  EXPECT_ST_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                    R"("b":{"dtype":"U8","shape":[1],"data_offsets":[7,8]}})",
                                    std::string(16, '\0')),
                  "overlap");
  // Empty tensors may sit anywhere, even on another tensor's bytes.
  auto f = open_bytes(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                        std::string(8, '\0')));
  EXPECT_EQ(f->tensors().size(), 2u);
}

TEST(Safetensors, RejectsDuplicatesAndBadMetadata) {
  EXPECT_ST_ERROR(safetensors_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                    R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                    std::string(2, '\0')),
                  "duplicate tensor name 'w'");
  EXPECT_ST_ERROR(safetensors_bytes(R"({"__metadata__":{"format":1}})", ""), "'format' is not a string");
  EXPECT_ST_ERROR(safetensors_bytes(R"({"__metadata__":["pt"]})", ""), "__metadata__ is not an object");
  // Same key nested deeper is not a duplicate tensor name.
  auto f = open_bytes(safetensors_bytes(R"({"__metadata__":{"w":"x"},)"
                                        R"("w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                                        std::string(1, '\0')));
  EXPECT_EQ(f->tensors().size(), 1u);
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const std::string bytes = small_model().build();
  const std::string path = temp_path("trunc.safetensors");
  for (size_t n = 0; n < bytes.size(); ++n)
    ASSERT_NE(error_of(bytes.substr(0, n), path), "") << "prefix of " << n << " bytes parsed";
  EXPECT_EQ(error_of(bytes, path), "");
}

TEST(Safetensors, CorruptedHeaderBytesNeverCrash) {
  const SafetensorsBuilder b = small_model();
  const std::string bytes = b.build();
  const size_t header_end = 8 + b.header_json().size();
  const std::string path = temp_path("corrupt.safetensors");
  size_t errors = 0;
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{'9'}, uint8_t{'"'}, uint8_t{0xff}}) {
      std::string corrupt = bytes;
      corrupt[pos] = static_cast<char>(value);
      errors += error_of(corrupt, path).empty() ? 0 : 1;
    }
  }
  EXPECT_GT(errors, header_end);
}

}  // namespace
}  // namespace zen
