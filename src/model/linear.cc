#include "model/linear.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "base/error.h"
#include "base/mmap.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/nvfp4.h"
#include "kernels/cpu/quant.h"

namespace zen {
namespace {

constexpr int64_t kNvfp4Group = kernels::kNvfp4GroupSize;

// "FP8", "NVFP4", "MIXED_PRECISION" (-> None, per-layer entries decide), null -> None.
QuantAlgo parse_algo(const nlohmann::json& v, const std::string& where) {
  if (v.is_null()) return QuantAlgo::None;
  if (!v.is_string()) fail(where, ": quant_algo must be a string, got ", v.dump());
  const std::string s = v.get<std::string>();
  if (s == "FP8") return QuantAlgo::Fp8;
  if (s == "NVFP4") return QuantAlgo::Nvfp4;
  if (s == "MIXED_PRECISION") return QuantAlgo::None;
  fail(where, ": unsupported quant_algo '", s, "' (supported: FP8, NVFP4, MIXED_PRECISION)");
}

void check_group_size(const nlohmann::json& v, const std::string& where) {
  if (v.is_null()) return;
  if (!v.is_number_integer() || v.get<int64_t>() != kNvfp4Group)
    fail(where, ": NVFP4 group_size must be 16, got ", v.dump());
}

std::vector<std::string> string_list(const nlohmann::json& v, const std::string& where) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (!v.is_array()) fail(where, ": expected a list of module names");
  for (const auto& e : v) {
    if (!e.is_string()) fail(where, ": expected a list of module names, found ", e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// quantized_layers: {module: {"quant_algo": ..., "group_size": ...}}.
void parse_layers(const nlohmann::json& v, const std::string& where, QuantConfig& q) {
  if (v.is_null()) return;
  if (!v.is_object()) fail(where, ": quantized_layers must be an object");
  for (const auto& [module, entry] : v.items()) {
    const std::string at = where + ": quantized_layers." + module;
    if (!entry.is_object()) fail(at, ": expected an object");
    const QuantAlgo a = parse_algo(entry.value("quant_algo", nlohmann::json()), at);
    if (a == QuantAlgo::None) fail(at, ": no per-layer quant_algo");
    if (a == QuantAlgo::Nvfp4) check_group_size(entry.value("group_size", nlohmann::json()), at);
    q.layers[module] = a;
  }
}

// A scalar scale: shape [] or [1], a float dtype, finite and positive.
bool read_scalar(Checkpoint& c, const std::string& name, float* out) {
  const TensorView* t = c.take(name);
  if (t == nullptr) return false;
  const bool scalar_shape = t->shape.empty() || (t->shape.size() == 1 && t->shape[0] == 1);
  if (!scalar_shape || !(t->dtype == DType::F32 || t->dtype == DType::BF16 || t->dtype == DType::F16)) {
    c.note_mismatch(name + ": expected a scalar F32 scale (shape [] or [1]), found " + t->shape_str() + " " +
                    dtype_name(t->dtype));
    return false;
  }
  kernels::dequantize_row(t->dtype, t->data, out, 1);
  if (!std::isfinite(*out) || *out <= 0.0f) {
    c.note_mismatch(name + ": scale must be finite and positive, found " + std::to_string(*out));
    return false;
  }
  return true;
}

// Takes `name` expecting `shape` and `dtype`; records a mismatch naming it otherwise.
const TensorView* take_exact(Checkpoint& c, const std::string& name, const std::vector<int64_t>& shape,
                             DType dtype) {
  const TensorView* t = c.take(name, shape);
  if (t == nullptr || t->shape != shape) return nullptr;  // missing / shape: already recorded
  if (t->dtype != dtype) {
    c.note_mismatch(name + ": expected dtype " + dtype_name(dtype) + ", found " + dtype_name(t->dtype));
    return nullptr;
  }
  return t;
}

std::string module_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() && weight_name.ends_with(suffix))
    return weight_name.substr(0, weight_name.size() - suffix.size());
  return weight_name;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

const char* quant_algo_name(QuantAlgo a) {
  switch (a) {
    case QuantAlgo::None: return "none";
    case QuantAlgo::Fp8: return "FP8";
    case QuantAlgo::Fp8Block: return "FP8 (block)";
    case QuantAlgo::Nvfp4: return "NVFP4";
  }
  return "?";
}

const char* linear_format_name(LinearFormat f) {
  switch (f) {
    case LinearFormat::Invalid: return "invalid";
    case LinearFormat::Plain: return "plain";
    case LinearFormat::Fp8: return "FP8";
    case LinearFormat::Fp8Block: return "FP8 block";
    case LinearFormat::Nvfp4: return "NVFP4";
  }
  return "?";
}

bool glob_match(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

QuantAlgo QuantConfig::declared_for(const std::string& module) const {
  if (auto it = layers.find(module); it != layers.end()) return it->second;
  for (const std::string& pattern : exclude)
    if (glob_match(pattern, module)) return QuantAlgo::None;
  return algo;
}

QuantConfig QuantConfig::from_hf_quant_config(const nlohmann::json& file, const std::string& source) {
  QuantConfig q;
  q.source = source;
  const auto it = file.is_object() ? file.find("quantization") : file.end();
  if (it == file.end() || !it->is_object()) fail(source, ": no \"quantization\" object");
  const nlohmann::json& j = *it;
  q.algo = parse_algo(j.value("quant_algo", nlohmann::json()), source);
  if (q.algo == QuantAlgo::Nvfp4) check_group_size(j.value("group_size", nlohmann::json()), source);
  q.exclude = string_list(j.value("exclude_modules", nlohmann::json()), source + ": exclude_modules");
  parse_layers(j.value("quantized_layers", nlohmann::json()), source, q);
  return q;
}

QuantConfig QuantConfig::from_quantization_config(const nlohmann::json& qc, const std::string& source) {
  QuantConfig q;
  q.source = source;
  if (!qc.is_object()) fail(source, ": quantization_config must be an object");
  const std::string method = qc.value("quant_method", std::string());
  if (method == "modelopt") {
    q.algo = parse_algo(qc.value("quant_algo", nlohmann::json()), source);
    q.exclude = string_list(qc.value("ignore", nlohmann::json()), source + ": ignore");
    parse_layers(qc.value("quantized_layers", nlohmann::json()), source, q);
    if (q.algo == QuantAlgo::Nvfp4) {
      check_group_size(qc.value("group_size", nlohmann::json()), source);
      if (auto groups = qc.find("config_groups"); groups != qc.end() && groups->is_object())
        for (const auto& [name, group] : groups->items())
          if (group.is_object() && group.contains("weights") && group["weights"].is_object())
            check_group_size(group["weights"].value("group_size", nlohmann::json()),
                             source + ": config_groups." + name);
    }
    return q;
  }
  if (method == "fp8") {
    q.algo = QuantAlgo::Fp8;
    if (auto bs = qc.find("weight_block_size"); bs != qc.end() && !bs->is_null()) {
      if (!bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() || !(*bs)[1].is_number_integer() ||
          (*bs)[0].get<int64_t>() <= 0 || (*bs)[1].get<int64_t>() <= 0)
        fail(source, ": weight_block_size must be two positive integers, got ", bs->dump());
      q.algo = QuantAlgo::Fp8Block;
      q.block_rows = (*bs)[0].get<int64_t>();
      q.block_cols = (*bs)[1].get<int64_t>();
    }
    for (const char* key : {"modules_to_not_convert", "ignored_layers"})
      for (std::string& m : string_list(qc.value(key, nlohmann::json()), source + ": " + key))
        q.exclude.push_back(std::move(m));
    return q;
  }
  fail(source, ": unsupported quant_method '", method, "' (supported: modelopt, fp8)");
}

QuantConfig QuantConfig::from_checkpoint(const Checkpoint& ckpt) {
  if (ckpt.format() == CheckpointFormat::Gguf) return {};
  const std::string hf_quant = (std::filesystem::path(ckpt.folder()) / "hf_quant_config.json").string();
  if (file_exists(hf_quant)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(hf_quant));
    } catch (const nlohmann::json::exception& e) {
      fail(hf_quant, ": invalid JSON: ", e.what());
    }
    return from_hf_quant_config(j, hf_quant);
  }
  const nlohmann::json& cfg = ckpt.hf_config();
  if (cfg.is_object() && cfg.contains("quantization_config") && !cfg["quantization_config"].is_null())
    return from_quantization_config(cfg["quantization_config"], ckpt.folder() + "/config.json: quantization_config");
  return {};
}

Linear Linear::bind(Checkpoint& c, const std::string& weight_name, std::vector<int64_t> shape,
                    const QuantConfig& quant, Use use) {
  ZEN_CHECK(shape.size() == 2, weight_name);
  Linear L;
  L.name = weight_name;
  L.rows = shape[0];
  L.cols = shape[1];
  const TensorView* stored = c.peek(weight_name);
  if (stored == nullptr) {
    c.note_missing(weight_name);
    return L;
  }
  const std::string module = module_of(weight_name);
  const QuantAlgo declared = quant.declared_for(module);
  auto contradicts = [&](const char* stored_as) {
    c.take(weight_name);
    c.note_mismatch(weight_name + ": stored as " + stored_as + " but the quantization config (" +
                    (quant.source.empty() ? std::string("none") : quant.source) + ") declares " +
                    quant_algo_name(declared) + " for " + module);
    return L;
  };
  // ModelOpt's static activation scale: optional, validated, not applied.
  auto take_input_scale = [&] {
    if (c.has(module + ".input_scale")) read_scalar(c, module + ".input_scale", &L.input_scale);
  };

  switch (stored->dtype) {
    case DType::U8: {  // NVFP4
      if (declared != QuantAlgo::Nvfp4) return contradicts("U8 (NVFP4 codes)");
      if (L.cols % kNvfp4Group != 0) {
        c.take(weight_name);
        c.note_mismatch(weight_name + ": NVFP4 needs K a multiple of 16, model expects K = " + std::to_string(L.cols));
        return L;
      }
      const TensorView* w = take_exact(c, weight_name, {L.rows, L.cols / 2}, DType::U8);
      const TensorView* s = take_exact(c, module + ".weight_scale", {L.rows, L.cols / kNvfp4Group}, DType::F8_E4M3);
      const bool global_ok = read_scalar(c, module + ".weight_scale_2", &L.scale);
      take_input_scale();
      if (w == nullptr || s == nullptr || !global_ok) return L;
      L.weight = w;
      L.group_scales = s;
      L.format = LinearFormat::Nvfp4;
      L.exact_activations = quant.nvfp4_exact_activations;
      if (use == Use::Matmul) L.prepare_matmul(c);
      return L;
    }
    case DType::F8_E4M3: {
      if (declared == QuantAlgo::Fp8) {
        const TensorView* w = take_exact(c, weight_name, shape, DType::F8_E4M3);
        const bool scale_ok = read_scalar(c, module + ".weight_scale", &L.scale);
        take_input_scale();
        if (w == nullptr || !scale_ok) return L;
        L.weight = w;
        L.format = LinearFormat::Fp8;
        return L;
      }
      if (declared == QuantAlgo::Fp8Block) {
        L.block_rows = quant.block_rows;
        L.block_cols = quant.block_cols;
        const TensorView* w = take_exact(c, weight_name, shape, DType::F8_E4M3);
        const std::string scale_name = module + ".weight_scale_inv";
        const std::vector<int64_t> grid = {ceil_div(L.rows, L.block_rows), ceil_div(L.cols, L.block_cols)};
        const TensorView* s = c.take(scale_name, grid);
        take_input_scale();
        if (w == nullptr || s == nullptr || s->shape != grid) return L;
        if (s->dtype != DType::F32 && s->dtype != DType::BF16 && s->dtype != DType::F16) {
          c.note_mismatch(scale_name + ": expected dtype F32, found " + dtype_name(s->dtype));
          return L;
        }
        L.block_scales.resize(static_cast<size_t>(s->numel()));  // tiny: one per 128x128 tile
        kernels::dequantize_row(s->dtype, s->data, L.block_scales.data(), s->numel());
        for (float v : L.block_scales)
          if (!std::isfinite(v)) {
            c.note_mismatch(scale_name + ": non-finite scale");
            return L;
          }
        L.weight = w;
        L.format = LinearFormat::Fp8Block;
        return L;
      }
      return contradicts("F8_E4M3");
    }
    default: {  // plain formats, whatever the config declares (see the header comment)
      const TensorView* t = c.take(weight_name, shape);
      if (t->shape != shape) return L;
      if (!kernels::is_supported_weight_dtype(t->dtype)) {
        c.note_mismatch(weight_name + ": dtype " + dtype_name(t->dtype) + " is not supported for matrices");
        return L;
      }
      L.weight = t;
      L.format = LinearFormat::Plain;
      if (use == Use::Matmul) L.prepare_matmul(c);
      return L;
    }
  }
}

namespace {

// A slice's bytes and the views over them (Linear::owned).
struct SliceStorage {
  std::vector<uint8_t> weight, scales;
  TensorView weight_view, scales_view;
};

int64_t total_rows(const std::vector<dist::Range>& rows) {
  int64_t n = 0;
  for (const dist::Range& r : rows) n += r.size();
  return n;
}

// Rows [rows) (each range in turn) and units [units) of a tensor whose rows hold `row_units`
// units of unit_bytes.
// Ranges divided by d (their bounds are multiples of d, or the end of the row).
std::vector<dist::Range> divided(const std::vector<dist::Range>& ranges, int64_t d) {
  std::vector<dist::Range> out;
  for (const dist::Range& r : ranges) out.push_back({r.begin / d, (r.end + d - 1) / d});
  return out;
}

// Rows [rows) and, of each, units [units) (each range in turn) of a tensor whose rows hold
// `row_units` units of unit_bytes.
std::vector<uint8_t> copy_slice(const TensorView& t, int64_t row_units, size_t unit_bytes,
                                const std::vector<dist::Range>& rows, const std::vector<dist::Range>& units) {
  const size_t row_bytes = static_cast<size_t>(row_units) * unit_bytes;
  const size_t bytes = static_cast<size_t>(total_rows(units)) * unit_bytes;
  std::vector<uint8_t> out(static_cast<size_t>(total_rows(rows)) * bytes);
  size_t at = 0;
  for (const dist::Range& range : rows) {
    ZEN_CHECK(t.nbytes >= static_cast<size_t>(range.end) * row_bytes, t.name, " is shorter than its shape");
    for (int64_t r = range.begin; r < range.end; ++r)
      for (const dist::Range& u : units) {
        const size_t n = static_cast<size_t>(u.size()) * unit_bytes;
        std::memcpy(&out[at], t.data + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(u.begin) * unit_bytes, n);
        at += n;
      }
  }
  return out;
}

std::string ranges_text(const std::vector<dist::Range>& ranges) {
  std::string out;
  for (size_t i = 0; i < ranges.size(); ++i)
    out += (i ? "+" : "") + std::to_string(ranges[i].begin) + ":" + std::to_string(ranges[i].end);
  return out;
}

std::string slice_name(const std::string& name, const std::vector<dist::Range>& rows,
                       const std::vector<dist::Range>& cols) {
  return name + "[" + ranges_text(rows) + ", " + ranges_text(cols) + "]";
}

}  // namespace

int64_t Linear::column_block(const Checkpoint& c, const std::string& weight_name, const QuantConfig& quant) {
  const TensorView* t = c.peek(weight_name);
  if (t == nullptr) return 1;
  if (t->dtype == DType::U8) return 2 * kNvfp4Group;
  if (t->dtype == DType::F8_E4M3) return quant.declared_for(module_of(weight_name)) == QuantAlgo::Fp8Block ? quant.block_cols : 1;
  return dtype_block_elems(t->dtype);
}

Linear Linear::bind_slice(Checkpoint& c, const std::string& weight_name, std::vector<int64_t> shape,
                          const QuantConfig& quant, dist::Range rows, dist::Range cols, Use use) {
  return bind_slice(c, weight_name, std::move(shape), quant, std::vector<dist::Range>{rows},
                    std::vector<dist::Range>{cols}, use);
}

Linear Linear::bind_slice(Checkpoint& c, const std::string& weight_name, std::vector<int64_t> shape,
                          const QuantConfig& quant, const std::vector<dist::Range>& rows, dist::Range cols, Use use) {
  return bind_slice(c, weight_name, std::move(shape), quant, rows, std::vector<dist::Range>{cols}, use);
}

Linear Linear::bind_slice(Checkpoint& c, const std::string& weight_name, std::vector<int64_t> shape,
                          const QuantConfig& quant, const std::vector<dist::Range>& rows,
                          const std::vector<dist::Range>& cols, Use use) {
  Linear full = bind(c, weight_name, shape, quant, Use::Rows);
  if (!full.valid()) return full;
  if (rows.size() == 1 && rows[0] == dist::Range{0, full.rows} && cols.size() == 1 &&
      cols[0] == dist::Range{0, full.cols}) {
    if (use == Use::Matmul) full.prepare_matmul(c);
    return full;
  }
  return slice(c, full, rows, cols, use);
}

Linear Linear::slice(const Checkpoint& c, const Linear& full, const std::vector<dist::Range>& rows,
                     const std::vector<dist::Range>& cols, Use use) {
  ZEN_CHECK(full.valid() && full.owned == nullptr && full.packed == nullptr, full.name,
            ": only a tensor as stored can be sliced");
  const std::string& weight_name = full.name;
  const int64_t N = full.rows, K = full.cols;
  ZEN_CHECK(!rows.empty() && !cols.empty(), weight_name, ": empty slice");
  for (const dist::Range& r : rows)
    ZEN_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= N, weight_name, ": slice out of range");
  for (const dist::Range& r : cols)
    ZEN_CHECK(r.begin >= 0 && r.begin < r.end && r.end <= K, weight_name, ": slice out of range");
  const std::string what = slice_name(weight_name, rows, cols);
  auto require_unit = [&](int64_t unit, const std::string& of) {
    for (const dist::Range& r : cols)
      if (r.begin % unit != 0 || (r.end % unit != 0 && r.end != K))
        fail(weight_name, ": tensor parallelism would cut its columns at ", r.begin, "..", r.end,
             ", inside a block of ", unit, " (", of, "); choose a tensor parallel size whose split falls on blocks");
  };
  auto store = std::make_shared<SliceStorage>();
  Linear L = full;
  L.name = what;
  L.rows = total_rows(rows);
  L.cols = total_rows(cols);
  L.packed = nullptr;
  const TensorView& w = *full.weight;
  switch (full.format) {
    case LinearFormat::Plain: {
      const int64_t unit = dtype_block_elems(w.dtype);
      require_unit(unit, std::string(dtype_name(w.dtype)) + " blocks");
      store->weight = copy_slice(w, K / unit, dtype_block_bytes(w.dtype), rows, divided(cols, unit));
      break;
    }
    case LinearFormat::Fp8:
      store->weight = copy_slice(w, K, 1, rows, cols);
      break;
    case LinearFormat::Fp8Block: {
      require_unit(full.block_cols, "an FP8 scale tile");
      for (const dist::Range& range : rows)
        if (range.begin % full.block_rows != 0 ||
            (range.end % full.block_rows != 0 && range.end != N && &range != &rows.back()))
          fail(weight_name, ": tensor parallelism would cut its rows at ", range.begin, "..", range.end,
               ", inside an FP8 scale tile of ", full.block_rows, " rows");
      store->weight = copy_slice(w, K, 1, rows, cols);
      const int64_t grid_cols = ceil_div(K, full.block_cols);
      L.block_scales.clear();
      for (const dist::Range& range : rows)
        for (int64_t br = range.begin / full.block_rows; br < ceil_div(range.end, full.block_rows); ++br)
          for (const dist::Range& col : cols)
            for (int64_t bc = col.begin / full.block_cols; bc < ceil_div(col.end, full.block_cols); ++bc)
              L.block_scales.push_back(full.block_scales[static_cast<size_t>(br * grid_cols + bc)]);
      break;
    }
    case LinearFormat::Nvfp4: {
      require_unit(2 * kNvfp4Group, "NVFP4 packs groups of 16 in pairs");
      store->weight = copy_slice(w, K / 2, 1, rows, divided(cols, 2));
      store->scales = copy_slice(*full.group_scales, K / kNvfp4Group, 1, rows, divided(cols, kNvfp4Group));
      store->scales_view = {what + ".weight_scale", DType::F8_E4M3, {L.rows, L.cols / kNvfp4Group},
                            store->scales.data(), store->scales.size()};
      L.group_scales = &store->scales_view;
      break;
    }
    case LinearFormat::Invalid: break;
  }
  std::vector<int64_t> stored_shape = w.shape;
  stored_shape[0] = L.rows;
  stored_shape[1] = full.format == LinearFormat::Nvfp4 ? L.cols / 2 : L.cols;
  store->weight_view = {what, w.dtype, stored_shape, store->weight.data(), store->weight.size()};
  L.weight = &store->weight_view;
  L.owned = store;
  c.release_pages(w);  // what the slice needed is copied
  if (full.group_scales != nullptr) c.release_pages(*full.group_scales);
  if (use == Use::Matmul && packing_enabled()) {
    if (L.format == LinearFormat::Plain && kernels::PackedMatrix::supports(w.dtype)) {
      L.packed = std::make_shared<const kernels::PackedMatrix>(kernels::PackedMatrix::pack(*L.weight));
      // Matmul and row lookups read the packed copy only (see prepare_matmul).
      store->weight = {};
      store->weight_view.data = nullptr;
      store->weight_view.nbytes = 0;
    } else if (L.format == LinearFormat::Nvfp4 && !L.exact_activations) {
      const kernels::Nvfp4Matrix m{L.weight->data, L.group_scales->data, L.rows, L.cols, L.scale};
      if (kernels::PackedMatrix::nvfp4_packable(m))
        L.packed = std::make_shared<const kernels::PackedMatrix>(kernels::PackedMatrix::pack_nvfp4(m, what));
    }
  }
  return L;
}

void Linear::prepare_matmul(const Checkpoint& c) {
  if (packed || owned || !packing_enabled()) return;  // a slice packs itself (bind_slice)
  if (format == LinearFormat::Plain && kernels::PackedMatrix::supports(weight->dtype)) {
    packed = std::make_shared<const kernels::PackedMatrix>(kernels::PackedMatrix::pack(*weight));
    c.release_pages(*weight);  // the copy is what matmul reads; keep RSS at one copy
  } else if (format == LinearFormat::Nvfp4 && !exact_activations) {
    const kernels::Nvfp4Matrix m{weight->data, group_scales->data, rows, cols, scale};
    if (!kernels::PackedMatrix::nvfp4_packable(m)) return;  // K = 16 (mod 32): the f32 kernels
    packed = std::make_shared<const kernels::PackedMatrix>(kernels::PackedMatrix::pack_nvfp4(m, name));
    c.release_pages(*weight);
    c.release_pages(*group_scales);
  }
}

bool Linear::requantize_q8_0() {
  if (format != LinearFormat::Plain || packed || cols % 32 != 0 || !packing_enabled() ||
      !kernels::PackedMatrix::supports(DType::Q8_0) ||
      (weight->dtype != DType::F32 && weight->dtype != DType::F16 && weight->dtype != DType::BF16))
    return false;
  const size_t row_bytes = static_cast<size_t>(cols / 32) * sizeof(kernels::BlockQ8_0);
  std::vector<uint8_t> q(static_cast<size_t>(rows) * row_bytes);
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t in_row = weight->nbytes / static_cast<size_t>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    kernels::dequantize_row(weight->dtype, weight->data + static_cast<size_t>(r) * in_row, row.data(), cols);
    kernels::ref::quantize_weight_row_q8_0(row.data(), reinterpret_cast<kernels::BlockQ8_0*>(&q[static_cast<size_t>(r) * row_bytes]), cols);
  }
  const TensorView view{name, DType::Q8_0, {rows, cols}, q.data(), q.size()};
  packed = std::make_shared<const kernels::PackedMatrix>(kernels::PackedMatrix::pack(view));
  return true;
}

bool Linear::packing_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("ZEN_PACKED_WEIGHTS");
    return kernels::PackedMatrix::available() && !(env != nullptr && std::string(env) == "0");
  }();
  return enabled;
}

void Linear::matmul(const float* x, int64_t n_tokens, float* y, ThreadPool& pool) const {
  if (packed) return packed->matmul(x, n_tokens, y, pool);
  switch (format) {
    case LinearFormat::Plain: return kernels::matmul(*weight, x, n_tokens, y, pool);
    case LinearFormat::Fp8: {
      const kernels::Fp8Matrix m{weight->data, rows, cols, &scale, rows, cols};
      return kernels::fp8_matmul(m, x, n_tokens, y, pool);
    }
    case LinearFormat::Fp8Block: {
      const kernels::Fp8Matrix m{weight->data, rows, cols, block_scales.data(), block_rows, block_cols};
      return kernels::fp8_matmul(m, x, n_tokens, y, pool);
    }
    case LinearFormat::Nvfp4: {
      const kernels::Nvfp4Matrix m{weight->data, group_scales->data, rows, cols, scale};
      return kernels::nvfp4_matmul(m, x, n_tokens, y, pool);
    }
    case LinearFormat::Invalid: break;
  }
  ZEN_CHECK(false, "matmul with unbound weight ", name);
}

void Linear::dequantize_row(int64_t row, float* out) const {
  ZEN_CHECK(row >= 0 && row < rows, name, " row ", row);
  switch (format) {
    case LinearFormat::Plain: {
      if (packed) return packed->dequantize_row(row, out);  // the same bits; the file's pages stay released
      const size_t row_bytes = dtype_row_bytes(weight->dtype, cols);
      return kernels::dequantize_row(weight->dtype, weight->data + static_cast<size_t>(row) * row_bytes, out, cols);
    }
    case LinearFormat::Fp8:
      return kernels::fp8_dequantize_row({weight->data, rows, cols, &scale, rows, cols}, row, out);
    case LinearFormat::Fp8Block:
      return kernels::fp8_dequantize_row({weight->data, rows, cols, block_scales.data(), block_rows, block_cols}, row,
                                         out);
    case LinearFormat::Nvfp4:
      return kernels::nvfp4_dequantize_row({weight->data, group_scales->data, rows, cols, scale}, row, out);
    case LinearFormat::Invalid: break;
  }
  ZEN_CHECK(false, "dequantize_row with unbound weight ", name);
}

}  // namespace zen
