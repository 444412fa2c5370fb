#include "attest/model_signing.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap.h"

namespace zen::attest {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kMaxSignatureBytes = size_t{64} << 20;
constexpr size_t kMaxResources = size_t{1} << 20;
constexpr size_t kMaxSignatures = 16;
constexpr size_t kMaxIgnorePaths = 4096;
constexpr std::string_view kBundleMediaType = "application/vnd.dev.sigstore.bundle";
constexpr std::string_view kPayloadType = "application/vnd.in-toto+json";
constexpr std::string_view kStatementType = "https://in-toto.io/Statement/v1";
constexpr std::string_view kPredicateType = "https://model_signing/signature/v1.0";
constexpr std::string_view kPredicateTypeV02 = "https://model_signing/Digests/v0.1";
// model-signing ignores these at verification whatever the signature records.
constexpr const char* kGitPaths[] = {".git", ".gitattributes", ".github", ".gitignore"};

// Names come from the signature or the folder and are printed one problem per line: control
// characters are escaped and length capped.
std::string printable(std::string_view s) {
  constexpr size_t kMax = 256;
  std::string out;
  for (const char ch : s.substr(0, kMax)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      out.push_back(ch);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  if (s.size() > kMax) out += "...";
  return out;
}

// ---- JSON access that names the field it rejects ----

json parse_json(std::string_view text, const std::string& what) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    fail(what, ": not JSON (syntax error at byte ", e.byte, ")");
  } catch (const json::exception&) {
    fail(what, ": not valid JSON");
  }
}

const json* find(const json& obj, const std::string& where, const char* key) {
  if (!obj.is_object()) fail(where, ": expected an object, got ", obj.type_name());
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

using Is = bool (json::*)() const noexcept;

const json& need(const json& obj, const std::string& where, const char* key, Is is, const char* kind) {
  const json* v = find(obj, where, key);
  if (!v) fail(where, ".", key, ": missing");
  if (!(v->*is)()) fail(where, ".", key, ": expected ", kind, ", got ", v->type_name());
  return *v;
}

const std::string& need_string(const json& obj, const std::string& where, const char* key) {
  return need(obj, where, key, &json::is_string, "a string").get_ref<const std::string&>();
}
const json& need_object(const json& obj, const std::string& where, const char* key) {
  return need(obj, where, key, &json::is_object, "an object");
}
const json& need_array(const json& obj, const std::string& where, const char* key) {
  return need(obj, where, key, &json::is_array, "an array");
}

std::string at(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

// ---- The bundle ----

struct Envelope {
  std::string payload;                  // decoded statement bytes
  std::vector<std::string> signatures;  // decoded DER signatures
  std::string key_hint;                 // unsigned; only for a clearer message
  bool has_certificate = false;
};

std::string read_signature(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) fail("signature file ", printable(path), ": no such file");
  if (!fs::is_regular_file(status)) fail("signature file ", printable(path), ": not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) fail("signature file ", printable(path), ": ", ec.message());
  if (size > kMaxSignatureBytes)
    fail(printable(path), ": ", size, " bytes; a model-signing signature is at most 64 MiB here");
  std::ifstream f(path, std::ios::binary);
  std::string text(size, '\0');
  f.read(text.data(), static_cast<std::streamsize>(size));
  if (!f || static_cast<uintmax_t>(f.gcount()) != size) fail("cannot read signature file ", printable(path));
  return text;
}

void read_key_material(const json& vm, Envelope& env) {
  if (!vm.is_object()) return;
  env.has_certificate = vm.contains("certificate") || vm.contains("x509CertificateChain");
  const auto pk = vm.find("publicKey");
  if (pk == vm.end() || !pk->is_object()) return;
  const auto hint = pk->find("hint");
  if (hint != pk->end() && hint->is_string()) env.key_hint = hint->get<std::string>();
}

Envelope parse_bundle(const std::string& text, const std::string& what) {
  const json b = parse_json(text, what);
  const std::string w = what + ": bundle";
  const std::string& media = need_string(b, w, "mediaType");
  if (!media.starts_with(kBundleMediaType))
    fail(what, ": not a Sigstore bundle (mediaType '", printable(media), "')");
  Envelope env;
  if (const json* vm = find(b, w, "verificationMaterial")) read_key_material(*vm, env);
  const std::string we = w + ".dsseEnvelope";
  const json& e = need_object(b, w, "dsseEnvelope");
  const std::string& type = need_string(e, we, "payloadType");
  if (type != kPayloadType) fail(we, ".payloadType is '", printable(type), "', expected ", kPayloadType);
  env.payload = base64_decode(need_string(e, we, "payload"), we + ".payload");
  const json& sigs = need_array(e, we, "signatures");
  if (sigs.empty() || sigs.size() > kMaxSignatures)
    fail(we, ".signatures: expected 1 to ", kMaxSignatures, " signatures, got ", sigs.size());
  for (size_t i = 0; i < sigs.size(); ++i) {
    const std::string ws = at(we + ".signatures", i);
    env.signatures.push_back(base64_decode(need_string(sigs[i], ws, "sig"), ws + ".sig"));
  }
  return env;
}

// model-signing checks the first signature; DSSE accepts any, and each is by the given key.
bool signature_verifies(const Envelope& env, const Key& key) {
  const std::string pae = dsse_pae(kPayloadType, env.payload);
  return std::any_of(env.signatures.begin(), env.signatures.end(),
                     [&](const std::string& sig) { return key.verify(pae, sig); });
}

std::string signature_problem(const Envelope& env, const Key& key) {
  std::string p = "signature does not verify with the given public key";
  if (env.has_certificate) return p + " (it was made with a certificate, not a key)";
  if (!env.key_hint.empty() && env.key_hint != to_hex(sha256(key.public_pem())))
    return p + " (the signature names another key)";
  return p;
}

// ---- The statement ----

struct Shard {
  uint64_t start = 0, end = 0;  // "shards" only; "files" has one shard for the whole file
  Digest digest{};
};

struct Statement {
  std::string model_name;
  Digest subject{};
  Digest listed{};  // SHA-256 over the resources' digests in the order listed
  bool sharded = false;
  uint64_t shard_size = 0;
  bool allow_symlinks = false;
  std::vector<std::string> ignore_paths;            // normalized, relative
  std::map<std::string, std::vector<Shard>> files;  // by relative path ("." = the model file)
};

void read_subject(const json& s, const std::string& w, Statement& st) {
  const json& subjects = need_array(s, w, "subject");
  if (subjects.size() != 1) fail(w, ".subject: expected one subject, got ", subjects.size());
  const std::string ws = w + ".subject[0]";
  st.model_name = need_string(subjects[0], ws, "name");
  st.subject = digest_from_hex(need_string(need_object(subjects[0], ws, "digest"), ws + ".digest", "sha256"),
                               ws + ".digest.sha256");
}

// "a/./b/" -> "a/b"; nothing for paths that cannot name anything inside the folder.
std::optional<std::string> normalize_ignore_path(std::string_view p) {
  if (p.empty() || p.front() == '/') return std::nullopt;
  std::string out;
  while (!p.empty()) {
    const size_t slash = p.find('/');
    const std::string_view part = p.substr(0, slash);
    p = slash == std::string_view::npos ? std::string_view() : p.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..") return std::nullopt;
    if (!out.empty()) out.push_back('/');
    out += part;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::vector<std::string> read_ignore_paths(const json& j, const std::string& w) {
  if (!j.is_array()) fail(w, ": expected an array, got ", j.type_name());
  if (j.size() > kMaxIgnorePaths) fail(w, ": ", j.size(), " paths; at most ", kMaxIgnorePaths, " are accepted");
  std::vector<std::string> out;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string()) fail(at(w, i), ": expected a string, got ", j[i].type_name());
    if (auto p = normalize_ignore_path(j[i].get_ref<const std::string&>())) out.push_back(std::move(*p));
  }
  return out;
}

// Python's protobuf Struct writes the shard size as a double (1000.0).
uint64_t read_shard_size(const json& j, const std::string& w) {
  const double d = j.get<double>();
  if (!(d >= 1 && d <= 9007199254740992.0 && d == std::floor(d)))
    fail(w, ": expected a positive whole number of bytes, got ", j.dump());
  return static_cast<uint64_t>(d);
}

void read_serialization(const json& ser, const std::string& w, Statement& st) {
  const std::string& method = need_string(ser, w, "method");
  if (method != "files" && method != "shards")
    fail(w, ".method '", printable(method), "' is unknown (model-signing writes files or shards)");
  st.sharded = method == "shards";
  const std::string& hash = need_string(ser, w, "hash_type");
  if (hash != "sha256")
    fail(w, ".hash_type '", printable(hash), "' is not supported: zen verifies sha256 (model-signing's default)");
  st.allow_symlinks = need(ser, w, "allow_symlinks", &json::is_boolean, "a boolean").get<bool>();
  if (const json* ip = find(ser, w, "ignore_paths")) st.ignore_paths = read_ignore_paths(*ip, w + ".ignore_paths");
  if (st.sharded)
    st.shard_size = read_shard_size(need(ser, w, "shard_size", &json::is_number, "a number"), w + ".shard_size");
}

// A resource name must stay inside the model folder: relative, no "." or ".." or empty parts.
void check_resource_path(const std::string& path, const std::string& w) {
  if (path == ".") return;  // a single-file model
  bool ok = !path.empty() && path.front() != '/' && path.find('\0') == std::string::npos;
  for (size_t begin = 0; ok && begin <= path.size();) {
    const size_t end = std::min(path.find('/', begin), path.size());
    const std::string_view part(path.data() + begin, end - begin);
    ok = !part.empty() && part != "." && part != "..";
    begin = end + 1;
  }
  if (!ok) fail(w, ": '", printable(path), "' is not a relative path inside the model folder");
}

uint64_t parse_offset(std::string_view s, const std::string& w) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) fail(w, ": '", printable(s), "' is not an offset");
  return v;
}

// "PATH:START:END" -> PATH (the offsets go to `shard`). PATH may itself hold ':'.
std::string split_shard_name(const std::string& name, const std::string& w, Shard& shard) {
  const size_t b = name.rfind(':');
  const size_t a = b == std::string::npos || b == 0 ? std::string::npos : name.rfind(':', b - 1);
  if (a == std::string::npos) fail(w, ": '", printable(name), "' is not PATH:START:END");
  shard.start = parse_offset(std::string_view(name).substr(a + 1, b - a - 1), w);
  shard.end = parse_offset(std::string_view(name).substr(b + 1), w);
  return name.substr(0, a);
}

void read_resources(const json& list, const std::string& w, Statement& st) {
  if (list.size() > kMaxResources) fail(w, ": ", list.size(), " resources; at most ", kMaxResources, " are accepted");
  const std::string algorithm = st.sharded ? "sha256-sharded-" + std::to_string(st.shard_size) : "sha256";
  Sha256 listed;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string wi = at(w, i);
    const std::string& name = need_string(list[i], wi, "name");
    const std::string& alg = need_string(list[i], wi, "algorithm");
    if (alg != algorithm) fail(wi, ".algorithm is '", printable(alg), "', expected '", algorithm, "'");
    Shard shard;
    shard.digest = digest_from_hex(need_string(list[i], wi, "digest"), wi + ".digest");
    listed.update(shard.digest.data(), shard.digest.size());
    const std::string path = st.sharded ? split_shard_name(name, wi + ".name", shard) : name;
    check_resource_path(path, wi + ".name");
    std::vector<Shard>& shards = st.files[path];
    if (!st.sharded && !shards.empty()) fail(wi, ".name: '", printable(name), "' is listed twice");
    shards.push_back(shard);
  }
  st.listed = listed.finish();
}

// model-signing cuts a file into [0,S) [S,2S) ... up to its size; anything else is not its.
void check_shards_tile(Statement& st, const std::string& what) {
  for (auto& [path, shards] : st.files) {
    std::sort(shards.begin(), shards.end(), [](const Shard& a, const Shard& b) { return a.start < b.start; });
    uint64_t next = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const Shard& s = shards[i];
      const bool last = i + 1 == shards.size();
      const bool ok = s.start == next && s.end > s.start &&
                      (last ? s.end - s.start <= st.shard_size : s.end - s.start == st.shard_size);
      if (!ok)
        fail(what, ": statement: the shards of '", printable(path), "' do not cut it into ", st.shard_size,
             "-byte pieces");
      next = s.end;
    }
  }
}

Statement parse_statement(const std::string& payload, const std::string& what) {
  const json s = parse_json(payload, what + ": DSSE payload");
  const std::string w = what + ": statement";
  const std::string& type = need_string(s, w, "_type");
  if (type != kStatementType) fail(w, "._type is '", printable(type), "', expected ", kStatementType);
  const std::string& predicate_type = need_string(s, w, "predicateType");
  if (predicate_type == kPredicateTypeV02)
    fail(what, ": a model-signing 0.2 signature (predicateType ", kPredicateTypeV02,
         "), not supported: re-sign with model-signing 1.0 or later");
  if (predicate_type != kPredicateType)
    fail(w, ".predicateType is '", printable(predicate_type), "', expected ", kPredicateType);
  Statement st;
  read_subject(s, w, st);
  const std::string wp = w + ".predicate";
  const json& predicate = need_object(s, w, "predicate");
  read_serialization(need_object(predicate, wp, "serialization"), wp + ".serialization", st);
  read_resources(need_array(predicate, wp, "resources"), wp + ".resources", st);
  if (st.sharded) check_shards_tile(st, what);
  return st;
}

// ---- The model folder ----

struct FileResult {
  std::string problem;  // "" = matches
  bool hashed = false;
};

// model-signing does not enter symlinked folders, so a file behind one is not the signed one.
std::optional<std::string> symlinked_folder_on_the_way(const fs::path& root, const std::string& rel) {
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
    struct stat s {};
    if (::lstat((root / rel.substr(0, slash)).c_str(), &s) != 0) return std::nullopt;
    if (S_ISLNK(s.st_mode)) return rel.substr(0, slash);
  }
  return std::nullopt;
}

bool digests_match(const MappedFile& m, const Statement& st, const std::vector<Shard>& shards) {
  if (!st.sharded) return sha256(m.data(), m.size()) == shards[0].digest;
  return std::all_of(shards.begin(), shards.end(),
                     [&](const Shard& s) { return sha256(m.data() + s.start, s.end - s.start) == s.digest; });
}

FileResult check_file(const fs::path& root, bool single, const std::string& rel, const std::vector<Shard>& shards,
                      const Statement& st) {
  const std::string shown = printable(single && rel == "." ? root.filename().string() : rel);
  if (single && rel != ".") return {shown + ": missing (the model is a single file)"};
  if (!single && rel == ".") return {".: missing (the signature is for a single file, not a folder)"};
  const fs::path full = single ? root : root / rel;
  if (auto link = symlinked_folder_on_the_way(root, rel))
    return {shown + ": missing (" + printable(*link) + " is a symlink; model-signing does not follow those)"};
  struct stat s {};
  if (::lstat(full.c_str(), &s) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return {shown + ": missing"};
    return {shown + ": cannot read (" + std::strerror(err) + ")"};
  }
  if (S_ISLNK(s.st_mode) && !st.allow_symlinks) return {shown + ": is a symlink, which the signature does not allow"};
  if (::stat(full.c_str(), &s) != 0 || !S_ISREG(s.st_mode)) return {shown + ": not a regular file"};
  const MappedFile m(full.string());
  if (st.sharded && m.size() != shards.back().end)
    return {shown + ": size differs (signed " + std::to_string(shards.back().end) + " bytes, found " +
                std::to_string(m.size()) + ")",
            true};
  if (!digests_match(m, st, shards)) return {shown + ": digest differs", true};
  return {"", true};
}

// Files are hashed in parallel (a checkpoint is often a few multi-GB shards); results keep the
// statement's (sorted) order.
std::vector<FileResult> check_files(const fs::path& root, bool single, const Statement& st) {
  std::vector<const std::pair<const std::string, std::vector<Shard>>*> items;
  for (const auto& item : st.files) items.push_back(&item);
  std::vector<FileResult> results(items.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < items.size();) {
      try {
        results[i] = check_file(root, single, items[i]->first, items[i]->second, st);
      } catch (const std::exception& e) {
        results[i] = {printable(items[i]->first) + ": cannot read (" + printable(e.what()) + ")"};
      }
    }
  };
  const size_t threads = std::min<size_t>({items.size(), std::max(1u, std::thread::hardware_concurrency()), 16});
  std::vector<std::jthread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  return results;
}

bool is_ignored(const std::string& rel, const std::vector<std::string>& ignored) {
  return std::any_of(ignored.begin(), ignored.end(), [&](const std::string& p) {
    return rel == p || (rel.size() > p.size() && rel.starts_with(p) && rel[p.size()] == '/');
  });
}

// The signature's list, model-signing's defaults, and the signature file when it lies inside.
std::vector<std::string> ignored_paths(const Statement& st, const fs::path& root, const std::string& signature) {
  std::vector<std::string> out = st.ignore_paths;
  out.insert(out.end(), std::begin(kGitPaths), std::end(kGitPaths));
  std::error_code ec1, ec2;
  const fs::path rel = fs::weakly_canonical(signature, ec1).lexically_relative(fs::weakly_canonical(root, ec2));
  if (!ec1 && !ec2 && !rel.empty() && *rel.begin() != "..") out.push_back(rel.generic_string());
  return out;
}

// Whether an entry the signature does not list is one model-signing would have signed.
bool would_be_signed(const fs::directory_entry& e, const Statement& st) {
  std::error_code ec;
  if (e.is_symlink(ec)) return !(st.allow_symlinks && e.is_directory(ec));  // never entered nor hashed
  if (e.is_regular_file(ec) && st.sharded && e.file_size(ec) == 0) return false;  // no shards
  return true;
}

std::vector<std::string> unsigned_files(const fs::path& root, const Statement& st,
                                        const std::vector<std::string>& ignored) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(root).generic_string();
    std::error_code ec2;
    const bool folder = !it->is_symlink(ec2) && it->is_directory(ec2);
    if (is_ignored(rel, ignored)) {
      if (folder) it.disable_recursion_pending();
    } else if (!folder && !st.files.contains(rel) && would_be_signed(*it, st)) {
      found.push_back(printable(rel) + ": present but not in the signature");
    }
  }
  if (ec) found.push_back("cannot list the model folder: " + ec.message());
  std::sort(found.begin(), found.end());
  return found;
}

fs::path model_root(const std::string& model_dir) {
  std::string p = model_dir;
  while (p.size() > 1 && p.back() == '/') p.pop_back();  // lexically_relative needs no trailing '/'
  std::error_code ec;
  const fs::file_status s = fs::status(p, ec);
  if (!fs::exists(s)) fail("model ", printable(model_dir), ": no such folder or file");
  if (!fs::is_directory(s) && !fs::is_regular_file(s)) fail("model ", printable(model_dir), ": not a folder or a file");
  return p;
}

}  // namespace

ModelSigningReport verify_model_signing(const std::string& model_dir, const std::string& signature_path,
                                        const Key& public_key) {
  const fs::path root = model_root(model_dir);
  const bool single = fs::is_regular_file(root);
  const Envelope env = parse_bundle(read_signature(signature_path), printable(signature_path));
  ModelSigningReport report;
  // An unverified payload is not worth reading further.
  if (!signature_verifies(env, public_key)) {
    report.problems.push_back(signature_problem(env, public_key));
    return report;
  }
  const Statement st = parse_statement(env.payload, printable(signature_path));
  report.model_name = printable(st.model_name);
  if (st.subject != st.listed) report.problems.push_back("the statement's subject digest does not match its resources");
  for (FileResult& r : check_files(root, single, st)) {
    report.files_checked += r.hashed;
    if (!r.problem.empty()) report.problems.push_back(std::move(r.problem));
  }
  if (!single)
    for (std::string& p : unsigned_files(root, st, ignored_paths(st, root, signature_path)))
      report.problems.push_back(std::move(p));
  return report;
}

}  // namespace zen::attest
