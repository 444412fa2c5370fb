#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "base/mmap.h"
#include "io/io_test_writers.h"

namespace zen {
namespace {

using namespace testing_io;
namespace fs = std::filesystem;

std::string make_folder(const std::string& stem) {
  const std::string dir = temp_path(stem);
  fs::create_directories(dir);
  return dir;
}

const char* const kConfig = R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4})";

SafetensorsBuilder tiny_model() {
  SafetensorsBuilder b;
  b.add("model.embed_tokens.weight", "F32", {6, 4});
  b.add("model.norm.weight", "F32", {4});
  b.add("model.layers.0.mlp.up_proj.weight", "BF16", {8, 4}, 2);
  b.add("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {2});
  b.add("model.layers.1.self_attn.rotary_emb.inv_freq", "F32", {2});
  return b;
}

std::string hf_folder(const SafetensorsBuilder& b) {
  const std::string dir = make_folder("hf");
  write_file(dir + "/config.json", kConfig);
  write_file(dir + "/model.safetensors", b.build());
  return dir;
}

// The zen::Error message from f(), or "" when it does not throw.
template <typename F>
std::string error_from(F&& f) {
  try {
    f();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(Checkpoint, OpensHfFolderAndConsumesEverything) {
  const std::string dir = hf_folder(tiny_model());
  auto ck = Checkpoint::open(dir);
  EXPECT_EQ(ck->format(), CheckpointFormat::HfFolder);
  EXPECT_EQ(ck->folder(), dir);
  EXPECT_EQ(ck->hf_config()["hidden_size"], 4);
  EXPECT_EQ(ck->gguf(), nullptr);
  const std::vector<std::string> names = ck->tensor_names();
  EXPECT_EQ(names.size(), 5u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(ck->total_bytes(), 6u * 4 * 4 + 4 * 4 + 8 * 4 * 2 + 2 * 4 * 2);
  EXPECT_TRUE(ck->has("model.norm.weight"));
  EXPECT_NE(ck->peek("model.norm.weight"), nullptr);

  const TensorView* embd = ck->take("model.embed_tokens.weight", {6, 4});
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{6, 4}));
  ck->take("model.norm.weight");
  ck->take("model.layers.0.mlp.up_proj.weight", {8, 4});
  ck->ignore(R"(model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq)", "recomputed from rope_theta");
  const LoadVerdict v = ck->verdict();
  EXPECT_TRUE(v.ok()) << v.to_string();
  ASSERT_EQ(v.ignored.size(), 2u);
  EXPECT_EQ(v.ignored[0], "model.layers.0.self_attn.rotary_emb.inv_freq: recomputed from rope_theta");
  EXPECT_NO_THROW(ck->require_clean());
}

TEST(Checkpoint, ReportsAllMissingAndUnexpectedByName) {
  auto ck = Checkpoint::open(hf_folder(tiny_model()));
  EXPECT_EQ(ck->take("model.layers.0.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(ck->take("lm_head.weight"), nullptr);
  ck->note_missing("mtp.fc.weight");
  ck->take("model.norm.weight");
  const LoadVerdict v = ck->verdict();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.missing, (std::vector<std::string>{"lm_head.weight", "model.layers.0.self_attn.q_proj.weight",
                                                 "mtp.fc.weight"}));
  EXPECT_EQ(v.unexpected,
            (std::vector<std::string>{"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight",
                                      "model.layers.0.self_attn.rotary_emb.inv_freq",
                                      "model.layers.1.self_attn.rotary_emb.inv_freq"}));
  const std::string msg = error_from([&] { ck->require_clean(); });
  for (const std::string& name : v.missing) EXPECT_NE(msg.find(name), std::string::npos) << msg;
  for (const std::string& name : v.unexpected) EXPECT_NE(msg.find(name), std::string::npos) << msg;
  // Sorted in the message too.
  EXPECT_LT(msg.find("lm_head.weight"), msg.find("mtp.fc.weight"));
}

TEST(Checkpoint, ReportsShapeMismatch) {
  auto ck = Checkpoint::open(hf_folder(tiny_model()));
  const TensorView* t = ck->take("model.embed_tokens.weight", {4, 6});
  EXPECT_NE(t, nullptr);  // still returned; the verdict carries the mismatch
  ck->note_mismatch("model.norm.weight: wrong dtype");
  ck->ignore(".*", "rest not needed here");
  const LoadVerdict v = ck->verdict();
  EXPECT_FALSE(v.ok());
  ASSERT_EQ(v.mismatched.size(), 2u);
  EXPECT_NE(v.mismatched[0].find("model.embed_tokens.weight: expected shape [4, 6], found [6, 4]"),
            std::string::npos)
      << v.mismatched[0];
  EXPECT_TRUE(v.unexpected.empty());
  EXPECT_THROW(ck->require_clean(), Error);
}

TEST(Checkpoint, IgnoreIsAFullMatchRegex) {
  auto ck = Checkpoint::open(hf_folder(tiny_model()));
  ck->ignore("inv_freq", "substring must not match");
  ck->ignore("model\\.norm", "prefix must not match");
  EXPECT_TRUE(ck->verdict().ignored.empty());
  ck->ignore(".*inv_freq", "first reason");
  ck->ignore(".*inv_freq", "second reason");
  const LoadVerdict v = ck->verdict();
  ASSERT_EQ(v.ignored.size(), 2u);
  EXPECT_NE(v.ignored[1].find("first reason"), std::string::npos);
  EXPECT_EQ(v.unexpected.size(), 3u);
  const std::string msg = error_from([&] { ck->ignore("(unclosed", "bad"); });
  EXPECT_NE(msg.find("invalid ignore pattern '(unclosed'"), std::string::npos) << msg;
}

TEST(Checkpoint, SingleSafetensorsFileNeedsConfigBeside) {
  const std::string dir = make_folder("single");
  write_file(dir + "/weights.safetensors", tiny_model().build());
  std::string msg = error_from([&] { Checkpoint::open(dir + "/weights.safetensors"); });
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  write_file(dir + "/config.json", kConfig);
  auto ck = Checkpoint::open(dir + "/weights.safetensors");
  EXPECT_EQ(ck->format(), CheckpointFormat::SafetensorsFile);
  EXPECT_EQ(ck->folder(), dir);
  EXPECT_EQ(ck->tensor_names().size(), 5u);
  write_file(dir + "/config.json", "{not json");
  msg = error_from([&] { Checkpoint::open(dir + "/weights.safetensors"); });
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
}

TEST(Checkpoint, FolderErrors) {
  const std::string dir = make_folder("bad");
  std::string msg = error_from([&] { Checkpoint::open(dir); });
  EXPECT_NE(msg.find("no config.json"), std::string::npos) << msg;
  write_file(dir + "/config.json", "[1]");
  msg = error_from([&] { Checkpoint::open(dir); });
  EXPECT_NE(msg.find("not a JSON object"), std::string::npos) << msg;
  write_file(dir + "/config.json", kConfig);
  msg = error_from([&] { Checkpoint::open(dir); });
  EXPECT_NE(msg.find("neither model.safetensors nor"), std::string::npos) << msg;
  msg = error_from([&] { Checkpoint::open(dir + "/model.bin"); });
  EXPECT_NE(msg.find("unsupported checkpoint path"), std::string::npos) << msg;
  msg = error_from([&] { Checkpoint::open(dir + "/absent.gguf"); });
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;
}

// Two shards and an index mapping each tensor to its shard.
struct ShardedFolder {
  std::string dir;
  nlohmann::json index;
};

ShardedFolder sharded_folder() {
  ShardedFolder s{make_folder("sharded"), {}};
  write_file(s.dir + "/config.json", kConfig);
  SafetensorsBuilder a, b;
  a.add("model.embed_tokens.weight", "F32", {6, 4});
  a.add("model.layers.0.mlp.up_proj.weight", "BF16", {8, 4}, 2);
  b.add("model.norm.weight", "F32", {4});
  b.add("lm_head.weight", "F32", {6, 4});
  write_file(s.dir + "/model-00001-of-00002.safetensors", a.build());
  write_file(s.dir + "/model-00002-of-00002.safetensors", b.build());
  s.index = {{"metadata", {{"total_size", 0}}},
             {"weight_map",
              {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
               {"model.layers.0.mlp.up_proj.weight", "model-00001-of-00002.safetensors"},
               {"model.norm.weight", "model-00002-of-00002.safetensors"},
               {"lm_head.weight", "model-00002-of-00002.safetensors"}}}};
  return s;
}

std::string open_sharded_error(const ShardedFolder& s) {
  write_file(s.dir + "/model.safetensors.index.json", s.index.dump());
  return error_from([&] { Checkpoint::open(s.dir); });
}

TEST(Checkpoint, ShardedFolder) {
  ShardedFolder s = sharded_folder();
  write_file(s.dir + "/model.safetensors.index.json", s.index.dump());
  auto ck = Checkpoint::open(s.dir);
  EXPECT_EQ(ck->tensor_names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                                          "model.layers.0.mlp.up_proj.weight",
                                                          "model.norm.weight"}));
  EXPECT_EQ(ck->total_bytes(), 96u + 64 + 16 + 96);
  for (const std::string& name : ck->tensor_names()) ASSERT_NE(ck->take(name), nullptr);
  EXPECT_NO_THROW(ck->require_clean());
}

TEST(Checkpoint, ShardedFolderErrors) {
  {
    ShardedFolder s = sharded_folder();
    s.index["weight_map"]["extra.weight"] = "model-00003-of-00003.safetensors";
    s.index["weight_map"]["extra2.weight"] = "model-00004-of-00004.safetensors";
    const std::string msg = open_sharded_error(s);
    EXPECT_NE(msg.find("2 shard file(s) named in weight_map are missing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model-00003-of-00003.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model-00004-of-00004.safetensors"), std::string::npos) << msg;
  }
  {
    ShardedFolder s = sharded_folder();
    s.index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";  // wrong shard
    s.index["weight_map"]["ghost.weight"] = "model-00002-of-00002.safetensors";       // nowhere
    const std::string msg = open_sharded_error(s);
    EXPECT_NE(msg.find("model.norm.weight (not in model-00001-of-00002.safetensors)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ghost.weight (not found"), std::string::npos) << msg;
  }
  {
    ShardedFolder s = sharded_folder();
    s.index["weight_map"]["lm_head.weight"] = "../model-00002-of-00002.safetensors";
    const std::string msg = open_sharded_error(s);
    EXPECT_NE(msg.find("'lm_head.weight' does not name a shard file"), std::string::npos) << msg;
  }
  {
    ShardedFolder s = sharded_folder();
    s.index = {{"metadata", {}}};
    EXPECT_NE(open_sharded_error(s).find("no 'weight_map'"), std::string::npos);
  }
  {
    ShardedFolder s = sharded_folder();  // a tensor stored in two shards
    SafetensorsBuilder dup;
    dup.add("model.norm.weight", "F32", {4});
    write_file(s.dir + "/model-00001-of-00002.safetensors", dup.build());
    s.index["weight_map"].erase("model.embed_tokens.weight");
    s.index["weight_map"].erase("model.layers.0.mlp.up_proj.weight");
    s.index["weight_map"]["other.weight"] = "model-00001-of-00002.safetensors";
    const std::string msg = open_sharded_error(s);
    EXPECT_NE(msg.find("'model.norm.weight' appears more than once"), std::string::npos) << msg;
  }
  {
    ShardedFolder s = sharded_folder();  // a corrupt shard surfaces its own error
    write_file(s.dir + "/model-00002-of-00002.safetensors", "garbage");
    const std::string msg = open_sharded_error(s);
    EXPECT_NE(msg.find("model-00002-of-00002.safetensors"), std::string::npos) << msg;
  }
}

TEST(Checkpoint, GgufFile) {
  GgufBuilder b;
  b.add_string("general.architecture", "qwen2");
  b.add_tensor("token_embd.weight", {4, 6});
  b.add_tensor("output_norm.weight", {4});
  const std::string path = temp_path("model.gguf");
  write_file(path, b.build());
  auto ck = Checkpoint::open(path);
  EXPECT_EQ(ck->format(), CheckpointFormat::Gguf);
  ASSERT_NE(ck->gguf(), nullptr);
  EXPECT_EQ(ck->gguf()->get_string("general.architecture"), "qwen2");
  EXPECT_TRUE(ck->folder().empty());
  EXPECT_TRUE(ck->hf_config().is_null());
  EXPECT_EQ(ck->total_bytes(), 6u * 4 * 4 + 4 * 4);
  ASSERT_NE(ck->take("token_embd.weight", {6, 4}), nullptr);
  const std::string msg = error_from([&] { ck->require_clean(); });
  EXPECT_NE(msg.find("output_norm.weight"), std::string::npos) << msg;
}

TEST(CheckpointRealFile, Stories260K) {
  const std::string path = ZEN_SOURCE_DIR "/../shared/data/stories260K/stories260K.gguf";
  if (!file_exists(path)) GTEST_SKIP() << "absent: " << path;
  auto ck = Checkpoint::open(path);
  EXPECT_EQ(ck->tensor_names().size(), 48u);
  EXPECT_EQ(ck->peek("token_embd.weight")->shape, (std::vector<int64_t>{512, 64}));
  // 260K parameters in f32, give or take.
  EXPECT_GT(ck->total_bytes(), 900'000u);
  EXPECT_LT(ck->total_bytes(), 1'200'000u);
  for (const std::string& name : ck->tensor_names()) ck->take(name);
  EXPECT_NO_THROW(ck->require_clean());
}

}  // namespace
}  // namespace zen
