#include "attest/digest.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "base/error.h"
#include "base/mmap.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace zen::attest {
namespace {

namespace fs = std::filesystem;

void put_u64(Sha256& h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h.update(b, 8);
}

void put_string(Sha256& h, std::string_view s) {
  put_u64(h, s.size());
  h.update(s);
}

void check_cancel(const std::atomic<bool>* cancel) {
  if (cancel != nullptr && cancel->load()) fail("weights digest cancelled");
}

// Hashes a mapped range in slices, dropping each slice from the resident set once read: a
// checkpoint larger than memory streams through the page cache instead of pinning it.
void update_streamed(Sha256& h, const MappedFile& file, const uint8_t* p, size_t n,
                     const std::atomic<bool>* cancel = nullptr) {
  constexpr size_t kSlice = size_t{64} << 20;
  for (size_t done = 0; done < n; done += kSlice) {
    check_cancel(cancel);
    const size_t len = std::min(kSlice, n - done);
    h.update(p + done, len);
    file.drop_pages(p + done, len);
  }
}

Digest leaf_of(const TensorView& t, const MappedFile* file, const std::atomic<bool>* cancel = nullptr) {
  Sha256 h;
  const uint8_t leaf_prefix = 0x00;
  h.update(&leaf_prefix, 1);
  h.update(kCanonicalization, std::char_traits<char>::length(kCanonicalization) + 1);  // with its NUL
  put_string(h, t.name);
  put_string(h, dtype_name(t.dtype));
  put_u64(h, t.shape.size());
  for (int64_t d : t.shape) put_u64(h, static_cast<uint64_t>(d));
  put_u64(h, t.nbytes);
  if (file) update_streamed(h, *file, t.data, t.nbytes, cancel);
  else h.update(t.data, t.nbytes);
  return h.finish();
}

Digest node(const Digest& left, const Digest& right) {
  Sha256 h;
  const uint8_t node_prefix = 0x01;
  h.update(&node_prefix, 1);
  h.update(left.data(), left.size());
  h.update(right.data(), right.size());
  return h.finish();
}

Digest root_of(const Digest* leaves, size_t n) {
  if (n == 1) return leaves[0];
  size_t k = 1;
  while (k * 2 < n) k *= 2;
  return node(root_of(leaves, k), root_of(leaves + k, n - k));
}

// Whether s is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool is_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if ((b >> 6) != 2) return false;
      cp = cp << 6 | (b & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Files beside the weights whose content changes what the model does.
const char* role_of_side_file(const std::string& name) {
  static const std::set<std::string> kConfig = {"config.json", "generation_config.json"};
  static const std::set<std::string> kTokenizer = {
      "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
      "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json"};
  if (kConfig.count(name)) return "config";
  if (kTokenizer.count(name)) return "tokenizer";
  return nullptr;
}

// The opened weight files of one checkpoint.
struct WeightFiles {
  std::string format;
  std::string folder;  // for the config and tokenizer files; empty for a GGUF
  std::vector<std::unique_ptr<SafetensorsFile>> safetensors;
  std::unique_ptr<GgufFile> gguf;
  std::vector<std::pair<const TensorView*, const MappedFile*>> tensors;
};

std::vector<std::string> shards_from_index(const std::string& index_path, std::map<std::string, std::string>* map) {
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text_file(index_path));
  } catch (const nlohmann::json::exception& e) {
    fail(index_path, ": invalid JSON: ", e.what());
  }
  const auto it = index.is_object() ? index.find("weight_map") : index.end();
  if (it == index.end() || !it->is_object()) fail(index_path, ": no 'weight_map' object");
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : it->items()) {
    const std::string* s = shard.get_ptr<const std::string*>();
    if (!s || s->empty() || s->find('/') != std::string::npos || *s == "." || *s == "..")
      fail(index_path, ": weight_map entry '", tensor, "' does not name a shard file in the folder");
    shards.insert(*s);
    (*map)[tensor] = *s;
  }
  return {shards.begin(), shards.end()};
}

WeightFiles open_weight_files(const std::string& path) {
  WeightFiles w;
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  if (is_directory(path)) {
    w.folder = path;
    if (file_exists((fs::path(path) / "model.safetensors").string())) {
      shard_names = {"model.safetensors"};
    } else if (const std::string index = (fs::path(path) / "model.safetensors.index.json").string(); file_exists(index)) {
      shard_names = shards_from_index(index, &weight_map);
    } else {
      std::vector<std::string> ggufs;
      for (const auto& e : fs::directory_iterator(path)) {
        if (!e.is_regular_file()) continue;
        const std::string name = e.path().filename().string();
        if (ends_with(name, ".safetensors")) shard_names.push_back(name);
        if (ends_with(name, ".gguf")) ggufs.push_back(name);
      }
      std::sort(shard_names.begin(), shard_names.end());
      if (shard_names.empty() && ggufs.size() == 1) return open_weight_files((fs::path(path) / ggufs[0]).string());
      if (shard_names.empty())
        fail(path, ": no weights (no model.safetensors, model.safetensors.index.json, *.safetensors or single *.gguf)");
    }
  } else if (ends_with(path, ".gguf")) {
    w.format = "gguf";
    w.gguf = std::make_unique<GgufFile>(path);
    for (const TensorView& t : w.gguf->tensors()) w.tensors.push_back({&t, &w.gguf->file()});
    return w;
  } else if (ends_with(path, ".safetensors")) {
    w.folder = fs::path(path).parent_path().string();
    if (w.folder.empty()) w.folder = ".";
    shard_names = {fs::path(path).filename().string()};
  } else {
    if (!file_exists(path)) fail(path, ": no such file or folder");
    fail(path, ": not a checkpoint (give a model folder, a .safetensors or a .gguf file)");
  }
  w.format = "safetensors";
  for (const std::string& name : shard_names) {
    const std::string file = (fs::path(w.folder) / name).string();
    if (!file_exists(file)) fail(path, ": shard ", name, " is missing");
    w.safetensors.push_back(std::make_unique<SafetensorsFile>(file));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < w.safetensors.size(); ++i) {
    for (const TensorView& t : w.safetensors[i]->tensors()) {
      if (!seen.insert(t.name).second) fail(path, ": tensor '", t.name, "' appears more than once (again in ", shard_names[i], ")");
      if (!weight_map.empty()) {
        const auto it = weight_map.find(t.name);
        if (it == weight_map.end()) fail(path, ": tensor '", t.name, "' in ", shard_names[i], " is not in the index's weight_map");
        if (it->second != shard_names[i])
          fail(path, ": the index puts tensor '", t.name, "' in ", it->second, " but it is in ", shard_names[i]);
      }
      w.tensors.push_back({&t, &w.safetensors[i]->file()});
    }
  }
  for (const auto& [tensor, shard] : weight_map)
    if (!seen.count(tensor)) fail(path, ": the index names tensor '", tensor, "' in ", shard, " but no shard holds it");
  return w;
}

// One unit of parallel work: a tensor's leaf or a whole file's SHA-256.
struct Task {
  uint64_t bytes = 0;
  const TensorView* tensor = nullptr;
  const MappedFile* mapping = nullptr;
  std::string file;  // whole-file hash when tensor is null
  Digest* out = nullptr;
};

void run_tasks(std::vector<Task>& tasks, int threads, const std::atomic<bool>* cancel) {
  // Largest first, so the last tasks to start are short and the threads finish together.
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.bytes > b.bytes; });
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mu;
  auto work = [&] {
    for (size_t i; !failed && (i = next.fetch_add(1)) < tasks.size();) {
      Task& t = tasks[i];
      try {
        check_cancel(cancel);
        if (t.tensor) {
          *t.out = leaf_of(*t.tensor, t.mapping, cancel);
        } else {
          MappedFile f(t.file);
          Sha256 h;
          update_streamed(h, f, f.data(), f.size(), cancel);
          *t.out = h.finish();
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!failed.exchange(true)) error = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failed) fail(error);
}

}  // namespace

Digest tensor_leaf(const TensorView& t) { return leaf_of(t, nullptr); }

Digest merkle_root(const std::vector<Digest>& sorted_leaves) {
  ZEN_CHECK(!sorted_leaves.empty());
  return root_of(sorted_leaves.data(), sorted_leaves.size());
}

WeightsDigest digest_weights(const std::string& path, const DigestOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  WeightFiles w = open_weight_files(path);
  if (w.tensors.empty()) fail(path, ": the checkpoint holds no tensors");
  for (const auto& [t, file] : w.tensors)
    if (!is_utf8(t->name)) fail(path, ": a tensor name is not valid UTF-8 (a manifest could not name it)");
  std::sort(w.tensors.begin(), w.tensors.end(), [](const auto& a, const auto& b) { return a.first->name < b.first->name; });

  WeightsDigest d;
  d.format = w.format;
  d.tensors.resize(w.tensors.size());
  std::vector<Task> tasks;
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    const TensorView& t = *w.tensors[i].first;
    d.tensors[i] = {t.name, dtype_name(t.dtype), t.shape, t.nbytes, {}};
    d.tensor_bytes += t.nbytes;
    tasks.push_back({t.nbytes, &t, w.tensors[i].second, {}, &d.tensors[i].leaf});
  }
  std::vector<std::string> file_paths;  // beside d.files
  auto add_file = [&](const std::string& file, const std::string& role) {
    d.files.push_back({fs::path(file).filename().string(), role, static_cast<uint64_t>(fs::file_size(file)), {}});
    file_paths.push_back(file);
  };
  if (options.weight_files) {
    if (w.gguf) add_file(w.gguf->path(), "weights");
    for (const auto& s : w.safetensors) add_file(s->path(), "weights");
  }
  if (!w.folder.empty()) {
    std::vector<std::string> side;
    for (const auto& e : fs::directory_iterator(w.folder))
      if (e.is_regular_file() && role_of_side_file(e.path().filename().string())) side.push_back(e.path().filename().string());
    std::sort(side.begin(), side.end());
    for (const std::string& name : side) add_file((fs::path(w.folder) / name).string(), role_of_side_file(name));
  }
  for (size_t i = 0; i < d.files.size(); ++i) tasks.push_back({d.files[i].bytes, nullptr, nullptr, file_paths[i], &d.files[i].sha256});

  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), tasks.size()));
  run_tasks(tasks, threads, options.cancel);

  std::vector<Digest> leaves;
  leaves.reserve(d.tensors.size());
  for (const TensorLeaf& t : d.tensors) leaves.push_back(t.leaf);
  d.root = merkle_root(leaves);
  d.threads = threads;
  d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return d;
}

nlohmann::json WeightsDigest::to_json() const {
  nlohmann::json tensors_json = nlohmann::json::array();
  for (const TensorLeaf& t : tensors)
    tensors_json.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"bytes", t.bytes}, {"leaf", to_hex(t.leaf)}});
  nlohmann::json files_json = nlohmann::json::array();
  for (const FileDigest& f : files)
    files_json.push_back({{"path", f.path}, {"role", f.role}, {"bytes", f.bytes}, {"sha256", to_hex(f.sha256)}});
  return {{"canonicalization", canonicalization}, {"format", format}, {"root", to_hex(root)},
          {"tensor_count", tensors.size()}, {"tensor_bytes", tensor_bytes}, {"tensors", tensors_json},
          {"files", files_json}};
}

namespace {

const nlohmann::json& field(const nlohmann::json& obj, const char* key, nlohmann::json::value_t type, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail(where, ": missing '", key, "'");
  const bool ok = it->type() == type || (type == nlohmann::json::value_t::number_unsigned && it->is_number_integer() && *it >= 0);
  if (!ok) fail(where, ": '", key, "' has the wrong type (", it->type_name(), ")");
  return *it;
}

}  // namespace

WeightsDigest WeightsDigest::from_json(const nlohmann::json& j, const std::string& what) {
  using T = nlohmann::json::value_t;
  if (!j.is_object()) fail(what, ": a manifest is a JSON object");
  WeightsDigest d;
  d.canonicalization = field(j, "canonicalization", T::string, what).get<std::string>();
  if (d.canonicalization != kCanonicalization)
    fail(what, ": canonicalization '", d.canonicalization, "' is not one this zen computes (", kCanonicalization, ")");
  d.format = field(j, "format", T::string, what).get<std::string>();
  d.root = digest_from_hex(field(j, "root", T::string, what).get<std::string>(), what + ": root");
  const nlohmann::json& ts = field(j, "tensors", T::array, what);
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string where = what + ": tensors[" + std::to_string(i) + "]";
    if (!ts[i].is_object()) fail(where, ": not an object");
    TensorLeaf t;
    t.name = field(ts[i], "name", T::string, where).get<std::string>();
    t.dtype = field(ts[i], "dtype", T::string, where).get<std::string>();
    const nlohmann::json& shape = field(ts[i], "shape", T::array, where);
    if (shape.size() > 16) fail(where, ": shape has ", shape.size(), " dimensions");
    for (const auto& dim : shape) {
      if (!dim.is_number_integer() || dim < 0 || (dim.is_number_unsigned() && dim.get<uint64_t>() > uint64_t{INT64_MAX}))
        fail(where, ": shape holds something other than a non-negative 63-bit integer");
      t.shape.push_back(dim.get<int64_t>());
    }
    t.bytes = field(ts[i], "bytes", T::number_unsigned, where).get<uint64_t>();
    t.leaf = digest_from_hex(field(ts[i], "leaf", T::string, where).get<std::string>(), where + ": leaf");
    if (!d.tensors.empty() && !(d.tensors.back().name < t.name))
      fail(where, ": tensor names must be sorted and unique ('", t.name, "' after '", d.tensors.back().name, "')");
    d.tensor_bytes += t.bytes;
    d.tensors.push_back(std::move(t));
  }
  if (j.contains("files")) {
    const nlohmann::json& fs_json = field(j, "files", T::array, what);
    for (size_t i = 0; i < fs_json.size(); ++i) {
      const std::string where = what + ": files[" + std::to_string(i) + "]";
      if (!fs_json[i].is_object()) fail(where, ": not an object");
      FileDigest f;
      f.path = field(fs_json[i], "path", T::string, where).get<std::string>();
      f.role = field(fs_json[i], "role", T::string, where).get<std::string>();
      f.bytes = field(fs_json[i], "bytes", T::number_unsigned, where).get<uint64_t>();
      f.sha256 = digest_from_hex(field(fs_json[i], "sha256", T::string, where).get<std::string>(), where + ": sha256");
      d.files.push_back(std::move(f));
    }
  }
  // A manifest whose leaves do not make its root is edited or corrupt: say so rather than
  // report tensors as differing that the manifest itself got wrong.
  if (!d.tensors.empty()) {
    std::vector<Digest> leaves;
    for (const TensorLeaf& t : d.tensors) leaves.push_back(t.leaf);
    if (merkle_root(leaves) != d.root) fail(what, ": its tensor leaves do not hash to its root (edited or corrupt)");
  }
  return d;
}

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::vector<std::string> compare_manifest(const WeightsDigest& expected, const WeightsDigest& actual) {
  std::vector<std::string> problems;
  std::map<std::string, const TensorLeaf*> have;
  for (const TensorLeaf& t : actual.tensors) have[t.name] = &t;
  std::set<std::string> named;
  for (const TensorLeaf& e : expected.tensors) {
    named.insert(e.name);
    const auto it = have.find(e.name);
    if (it == have.end()) {
      problems.push_back("tensor " + e.name + ": missing");
      continue;
    }
    const TensorLeaf& a = *it->second;
    if (a.leaf == e.leaf) continue;
    std::string why;
    if (a.dtype != e.dtype) why += " dtype " + a.dtype + " (expected " + e.dtype + ")";
    if (a.shape != e.shape) why += " shape " + shape_string(a.shape) + " (expected " + shape_string(e.shape) + ")";
    if (why.empty()) why = " contents";
    problems.push_back("tensor " + e.name + ": differs:" + why);
  }
  for (const TensorLeaf& a : actual.tensors)
    if (!named.count(a.name)) problems.push_back("tensor " + a.name + ": extra (not in the manifest)");
  if (problems.empty() && expected.root != actual.root) problems.push_back("root differs");
  const std::vector<std::string> files = compare_side_files(expected.files, actual, "the manifest");
  problems.insert(problems.end(), files.begin(), files.end());
  return problems;
}

std::vector<std::string> compare_side_files(const std::vector<FileDigest>& recorded, const WeightsDigest& actual,
                                            const std::string& record) {
  std::vector<std::string> problems;
  std::map<std::string, const FileDigest*> files;
  for (const FileDigest& f : actual.files)
    if (f.role != "weights") files[f.path] = &f;
  std::set<std::string> covered;
  for (const FileDigest& e : recorded) {
    if (e.role == "weights") continue;  // plain hashes of weight files: informational
    covered.insert(e.path);
    const auto it = files.find(e.path);
    if (it == files.end()) problems.push_back("file " + e.path + ": missing");
    else if (it->second->sha256 != e.sha256) problems.push_back("file " + e.path + ": differs from " + record);
  }
  for (const auto& [path, f] : files)
    if (!covered.count(path)) problems.push_back("file " + path + ": extra (not in " + record + ")");
  return problems;
}

std::vector<std::string> gguf_hash_lines(const std::string& gguf_path) {
  GgufFile g(gguf_path);
  std::vector<std::string> lines;
  Sha256 whole;
  for (const TensorView& t : g.tensors()) {
    lines.push_back("sha256    " + to_hex(sha256(t.data, t.nbytes)) + "  " + gguf_path + ":" + t.name);
    whole.update(t.data, t.nbytes);
  }
  lines.push_back("sha256    " + to_hex(whole.finish()) + "  " + gguf_path);
  return lines;
}

}  // namespace zen::attest
