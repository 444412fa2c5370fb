#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

#include "base/error.h"
#include "base/mmap.h"

namespace zen {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join_path(const std::string& folder, const std::string& name) {
  return (std::filesystem::path(folder) / name).string();
}

nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
}

nlohmann::json read_config(const std::string& folder) {
  const std::string config_path = join_path(folder, "config.json");
  if (!file_exists(config_path)) fail("checkpoint folder ", folder, " has no config.json");
  nlohmann::json config = read_json_file(config_path);
  if (!config.is_object()) fail(config_path, ": not a JSON object");
  return config;
}

// A shard must be a plain file name inside the checkpoint folder.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

void append_section(std::ostringstream& os, const char* title, const std::vector<std::string>& names) {
  if (names.empty()) return;
  os << title << " (" << names.size() << "):\n";
  for (const std::string& n : names) os << "  " << n << '\n';
}

std::vector<std::string> sorted_unique(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

std::string LoadVerdict::to_string() const {
  std::ostringstream os;
  append_section(os, "missing tensors", missing);
  append_section(os, "mismatched tensors", mismatched);
  append_section(os, "unexpected tensors (neither used nor ignored)", unexpected);
  append_section(os, "ignored tensors", ignored);
  if (ok() && ignored.empty()) os << "all tensors consumed\n";
  return os.str();
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path) {
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  ck->path_ = path;

  auto index_tensors = [&ck](const std::vector<TensorView>& tensors, const std::string& file) {
    for (const TensorView& t : tensors)
      if (!ck->by_name_.emplace(t.name, &t).second)
        fail("checkpoint ", ck->path_, ": tensor '", t.name, "' appears more than once (again in ", file, ")");
  };

  if (is_directory(path)) {
    ck->format_ = CheckpointFormat::HfFolder;
    ck->folder_ = path;
    ck->hf_config_ = read_config(path);
    ck->open_hf_folder();
  } else if (ends_with(path, ".safetensors")) {
    if (!file_exists(path)) fail("checkpoint file not found: ", path);
    ck->format_ = CheckpointFormat::SafetensorsFile;
    std::string folder = std::filesystem::path(path).parent_path().string();
    ck->folder_ = folder.empty() ? "." : folder;
    ck->hf_config_ = read_config(ck->folder_);
    ck->shards_.push_back(std::make_unique<SafetensorsFile>(path));
  } else if (ends_with(path, ".gguf")) {
    if (!file_exists(path)) fail("checkpoint file not found: ", path);
    ck->format_ = CheckpointFormat::Gguf;
    ck->gguf_ = std::make_unique<GgufFile>(path);
    index_tensors(ck->gguf_->tensors(), path);
    return ck;
  } else {
    fail("unsupported checkpoint path ", path,
         " (expected a Hugging Face folder, a .safetensors file or a .gguf file)");
  }
  for (const auto& shard : ck->shards_) index_tensors(shard->tensors(), shard->path());
  ck->check_weight_map();
  return ck;
}

// Opens model.safetensors, or every shard named by model.safetensors.index.json.
void Checkpoint::open_hf_folder() {
  const std::string single = join_path(folder_, "model.safetensors");
  const std::string index_path = join_path(folder_, "model.safetensors.index.json");
  if (!file_exists(index_path)) {
    if (!file_exists(single))
      fail("checkpoint folder ", folder_, " has neither model.safetensors nor model.safetensors.index.json");
    shards_.push_back(std::make_unique<SafetensorsFile>(single));
    return;
  }
  const nlohmann::json index = read_json_file(index_path);
  const auto map_it = index.is_object() ? index.find("weight_map") : index.end();
  if (map_it == index.end() || !map_it->is_object())
    fail(index_path, ": no 'weight_map' object");
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>()))
      fail(index_path, ": weight_map entry '", tensor, "' does not name a shard file in the folder");
    weight_map_[tensor] = shard.get<std::string>();
    shard_names.insert(shard.get<std::string>());
  }
  std::vector<std::string> absent;
  for (const std::string& s : shard_names)
    if (!file_exists(join_path(folder_, s))) absent.push_back(s);
  if (!absent.empty()) {
    std::ostringstream os;
    for (const std::string& s : absent) os << "\n  " << s;
    fail(index_path, ": ", absent.size(), " shard file(s) named in weight_map are missing:", os.str());
  }
  for (const std::string& s : shard_names) shards_.push_back(std::make_unique<SafetensorsFile>(join_path(folder_, s)));
}

// Every weight_map entry must be stored in the shard it names.
void Checkpoint::check_weight_map() const {
  std::vector<std::string> wrong;
  for (const auto& [tensor, shard] : weight_map_) {
    auto it = by_name_.find(tensor);
    if (it == by_name_.end()) {
      wrong.push_back(tensor + " (not found; index says " + shard + ")");
      continue;
    }
    bool in_named_shard = false;
    for (const auto& f : shards_)
      if (std::filesystem::path(f->path()).filename() == shard) {
        const auto& ts = f->tensors();
        in_named_shard = !ts.empty() && it->second >= ts.data() && it->second < ts.data() + ts.size();
      }
    if (!in_named_shard) wrong.push_back(tensor + " (not in " + shard + ")");
  }
  if (wrong.empty()) return;
  std::sort(wrong.begin(), wrong.end());
  std::ostringstream os;
  for (const std::string& w : wrong) os << "\n  " << w;
  fail("checkpoint ", path_, ": ", wrong.size(), " weight_map entries do not match the shards:", os.str());
}

bool Checkpoint::has(const std::string& name) const { return by_name_.count(name) != 0; }

const TensorView* Checkpoint::peek(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView* Checkpoint::take(const std::string& name, const std::vector<int64_t>& expected_shape) {
  const TensorView* t = peek(name);
  if (t == nullptr) {
    note_missing(name);
    return nullptr;
  }
  consumed_[name] = true;
  if (!expected_shape.empty() && t->shape != expected_shape) {
    TensorView expected;
    expected.shape = expected_shape;
    note_mismatch(name + ": expected shape " + expected.shape_str() + ", found " + t->shape_str() + " " +
                  dtype_name(t->dtype));
  }
  return t;
}

void Checkpoint::note_missing(const std::string& name) { missing_.push_back(name); }

void Checkpoint::note_mismatch(const std::string& detail) { mismatched_.push_back(detail); }

void Checkpoint::ignore(const std::string& pattern, const std::string& reason) {
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    fail("invalid ignore pattern '", pattern, "': ", e.what());
  }
  std::unordered_set<std::string> already;  // first reason wins
  for (const auto& entry : ignored_) already.insert(entry.first);
  for (const auto& [name, view] : by_name_)
    if (std::regex_match(name, re) && already.insert(name).second) ignored_.emplace_back(name, reason);
}

LoadVerdict Checkpoint::verdict() const {
  LoadVerdict v;
  v.missing = sorted_unique(missing_);
  v.mismatched = sorted_unique(mismatched_);
  std::set<std::string> ignored_names;
  for (const auto& [name, reason] : ignored_) {
    ignored_names.insert(name);
    v.ignored.push_back(name + ": " + reason);
  }
  std::sort(v.ignored.begin(), v.ignored.end());
  for (const auto& [name, view] : by_name_)
    if (consumed_.count(name) == 0 && ignored_names.count(name) == 0) v.unexpected.push_back(name);
  std::sort(v.unexpected.begin(), v.unexpected.end());
  return v;
}

void Checkpoint::require_clean() const {
  const LoadVerdict v = verdict();
  if (!v.ok()) fail("checkpoint ", path_, " does not match the model:\n", v.to_string());
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(by_name_.size());
  for (const auto& [name, view] : by_name_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

void Checkpoint::release_pages(const TensorView& t) const {
  if (gguf_) gguf_->file().drop_pages(t.data, t.nbytes);
  for (const auto& s : shards_) s->file().drop_pages(t.data, t.nbytes);
  released_.push_back(&t);
}

void Checkpoint::release_loader_pages() const {
  // Per file, neighbouring tensors merge into one range, so the page they share goes too.
  const auto release_in = [&](const MappedFile& file) {
    std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
    for (const TensorView* t : released_)
      if (file.contains(t->data, t->nbytes)) ranges.emplace_back(t->data, t->data + t->nbytes);
    std::sort(ranges.begin(), ranges.end());
    // A gap under a page (alignment padding, a small tensor) goes too: a read maps it back.
    constexpr ptrdiff_t kGap = 4096;
    for (size_t i = 0; i < ranges.size();) {
      auto [begin, end] = ranges[i];
      for (++i; i < ranges.size() && ranges[i].first - end < kGap; ++i) end = std::max(end, ranges[i].second);
      file.drop_pages(begin, static_cast<size_t>(end - begin));
    }
  };
  if (gguf_) {
    gguf_->file().drop_pages(gguf_->file().data(), gguf_->data_offset());
    release_in(gguf_->file());
  }
  for (const auto& s : shards_) release_in(s->file());
}

size_t Checkpoint::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, view] : by_name_) total += view->nbytes;
  return total;
}

}  // namespace zen
