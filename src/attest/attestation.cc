#include "attest/attestation.h"

#include <cstdio>
#include <map>

#include "base/error.h"
#include "base/mmap.h"

namespace zen::attest {
namespace {

constexpr size_t kMaxEnvelopeBytes = size_t{16} << 20;
// A manifest holds ~250 bytes per tensor: 64 MiB is a quarter of a million tensors.
constexpr size_t kMaxManifestBytes = size_t{64} << 20;

const nlohmann::json& member(const nlohmann::json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) fail(where, ": not a JSON object");
  const auto it = obj.find(key);
  if (it == obj.end()) fail(where, ": missing '", key, "'");
  return *it;
}

const std::string& string_member(const nlohmann::json& obj, const char* key, const std::string& where) {
  const nlohmann::json& v = member(obj, key, where);
  if (!v.is_string()) fail(where, ": '", key, "' is not a string");
  return v.get_ref<const std::string&>();
}

}  // namespace

nlohmann::json make_statement(const WeightsDigest& d, const AttestOptions& options) {
  nlohmann::json subjects = nlohmann::json::array();
  subjects.push_back({{"name", kWeightsSubject},
                      {"digest", {{"sha256", to_hex(d.root)}}},
                      {"annotations", {{"canonicalization", d.canonicalization}}}});
  for (const FileDigest& f : d.files)
    if (f.role != "weights") subjects.push_back({{"name", f.path}, {"digest", {{"sha256", to_hex(f.sha256)}}}});
  nlohmann::json predicate = {{"canonicalization", d.canonicalization},
                              {"format", d.format},
                              {"tensor_count", d.tensors.size()},
                              {"tensor_bytes", d.tensor_bytes}};
  if (!options.training_config_sha256.empty())
    predicate["training_config"] = {
        {"digest", {{"sha256", to_hex(digest_from_hex(options.training_config_sha256, "--config-hash"))}}}};
  if (!options.benchmarks.is_null()) predicate["benchmarks"] = options.benchmarks;
  return {{"_type", kStatementType}, {"subject", subjects}, {"predicateType", kPredicateType}, {"predicate", predicate}};
}

std::string sign_statement(const nlohmann::json& statement, const Key& key) {
  const std::string payload = statement.dump();
  const std::string sig = key.sign(dsse_pae(kInTotoPayloadType, payload));
  const nlohmann::json envelope = {
      {"payloadType", kInTotoPayloadType},
      {"payload", base64_encode(payload)},
      {"signatures", {{{"keyid", key.key_id()}, {"sig", base64_encode(sig)}}}}};
  return envelope.dump(2) + "\n";
}

Attestation open_attestation(const std::string& envelope_text, const Key& public_key, const std::string& what) {
  if (envelope_text.size() > kMaxEnvelopeBytes)
    fail(what, ": ", envelope_text.size(), " bytes is too large for an attestation (at most ", kMaxEnvelopeBytes, ")");
  nlohmann::json envelope;
  try {
    envelope = nlohmann::json::parse(envelope_text);
  } catch (const nlohmann::json::exception& e) {
    fail(what, ": not JSON: ", e.what());
  }
  const std::string where = what + " (DSSE envelope)";
  const std::string& payload_type = string_member(envelope, "payloadType", where);
  if (payload_type != kInTotoPayloadType) fail(where, ": payloadType '", payload_type, "' is not ", kInTotoPayloadType);
  const std::string payload = base64_decode(string_member(envelope, "payload", where), where + ": payload");
  const nlohmann::json& sigs = member(envelope, "signatures", where);
  if (!sigs.is_array() || sigs.empty()) fail(where, ": 'signatures' is not a non-empty array");
  if (sigs.size() > 64) fail(where, ": ", sigs.size(), " signatures (at most 64)");
  const std::string pae = dsse_pae(payload_type, payload);
  const std::string key_id = public_key.key_id();
  bool verified = false;
  for (size_t i = 0; i < sigs.size() && !verified; ++i) {
    const std::string w = where + ": signatures[" + std::to_string(i) + "]";
    verified = public_key.verify(pae, base64_decode(string_member(sigs[i], "sig", w), w + ": sig"));
  }
  if (!verified) fail(what, ": the signature does not verify with the given public key (key id ", key_id, ")");
  Attestation a = parse_statement(payload, what);
  a.key_id = key_id;
  return a;
}

Attestation parse_statement(const std::string& payload, const std::string& what) {
  Attestation a;
  try {
    a.statement = nlohmann::json::parse(payload);
  } catch (const nlohmann::json::parse_error& e) {
    fail(what, ": the payload is not JSON (at byte ", e.byte, ")");  // its bytes are not echoed
  } catch (const nlohmann::json::exception&) {
    fail(what, ": the payload is not JSON (a number out of range)");
  }
  const std::string sw = what + " (statement)";
  if (string_member(a.statement, "_type", sw) != kStatementType)
    fail(sw, ": _type '", string_member(a.statement, "_type", sw), "' is not ", kStatementType);
  const std::string& predicate_type = string_member(a.statement, "predicateType", sw);
  if (predicate_type != kPredicateType) fail(sw, ": predicateType '", predicate_type, "' is not ", kPredicateType);
  const std::string& canon = string_member(member(a.statement, "predicate", sw), "canonicalization", sw + ": predicate");
  if (canon != kCanonicalization)
    fail(sw, ": it attests canonicalization '", canon, "', which this zen does not compute (it computes ", kCanonicalization,
         "); attest the weights again with this version");
  const nlohmann::json& subjects = member(a.statement, "subject", sw);
  if (!subjects.is_array() || subjects.empty()) fail(sw, ": 'subject' is not a non-empty array");
  bool have_root = false;
  for (size_t i = 0; i < subjects.size(); ++i) {
    const std::string w = sw + ": subject[" + std::to_string(i) + "]";
    const std::string& name = string_member(subjects[i], "name", w);
    const Digest digest = digest_from_hex(string_member(member(subjects[i], "digest", w), "sha256", w + ": digest"), w + ": digest");
    if (name == kWeightsSubject) {
      if (have_root) fail(w, ": a second '", kWeightsSubject, "' subject");
      a.root = digest;
      have_root = true;
    } else {
      a.files.push_back({name, "", 0, digest});
    }
  }
  if (!have_root) fail(sw, ": no '", kWeightsSubject, "' subject (the weights root)");
  return a;
}

std::vector<std::string> compare_attestation(const Attestation& a, const WeightsDigest& actual) {
  std::vector<std::string> problems;
  if (a.root != actual.root)
    problems.push_back("weights root " + to_hex(actual.root) + " differs from the attested " + to_hex(a.root));
  const std::vector<std::string> files = compare_side_files(a.files, actual, "the attestation");
  problems.insert(problems.end(), files.begin(), files.end());
  return problems;
}

namespace {

bool looks_like_root(std::string_view s) {
  if (s.starts_with("sha256:")) s.remove_prefix(7);
  return s.size() == 64 && s.find_first_not_of("0123456789abcdefABCDEF") == std::string_view::npos;
}

std::string rate(const WeightsDigest& d) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%zu tensors, %.2f GB in %.2f s (%.2f GB/s, %d threads)", d.tensors.size(),
                d.tensor_bytes / 1e9, d.seconds, d.seconds > 0 ? d.tensor_bytes / 1e9 / d.seconds : 0.0, d.threads);
  return buf;
}

}  // namespace

WeightsCheck check_weights(const std::string& model_path, const std::string& expected,
                           const std::string& public_key_path, int threads) {
  DigestOptions options;
  options.threads = threads;
  options.weight_files = false;  // roots, manifests and attestations do not cover them
  WeightsCheck c;
  // A public key means the caller wants a signature checked: anything unsigned is refused,
  // or a manifest of other weights could stand in for the attestation.
  const bool want_signed = !public_key_path.empty();
  if (looks_like_root(expected)) {
    if (want_signed) fail("a public key was given but '", expected, "' is a bare root, not a signed attestation");
    const Digest want = digest_from_hex(expected, "expected root");
    c.digest = digest_weights(model_path, options);
    if (c.digest.root != want)
      c.problems.push_back("weights root " + to_hex(c.digest.root) + " differs from the expected " + to_hex(want) +
                           " (a manifest would name the tensors)");
    c.summary = "root " + to_hex(c.digest.root) + ": " + rate(c.digest);
    return c;
  }
  if (!file_exists(expected)) fail("'", expected, "' is neither a weights root (64 hex digits) nor a file");
  const std::string text = read_text_file(expected);
  if (text.size() > kMaxManifestBytes) fail(expected, ": ", text.size(), " bytes is too large for a manifest (at most ", kMaxManifestBytes, ")");
  if (const size_t first = text.find_first_not_of(" \t\r\n"); first == std::string::npos || text[first] != '{')
    fail(expected, ": not a manifest or attestation (a JSON object)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(expected, ": not JSON: ", e.what());
  }
  if (j.is_object() && j.contains("payloadType")) {
    if (public_key_path.empty()) fail(expected, " is an attestation: give the signer's public key (PEM) to check it");
    const Attestation a = open_attestation(text, Key::load_public_pem(public_key_path), expected);
    c.digest = digest_weights(model_path, options);
    c.problems = compare_attestation(a, c.digest);
    c.summary = "attestation signed by key " + a.key_id.substr(0, 16) + ", root " + to_hex(c.digest.root) + ", " +
                std::to_string(a.files.size()) + " files: " + rate(c.digest);
    return c;
  }
  if (want_signed) fail(expected, " is not a signed attestation (no DSSE envelope), but a public key was given to check one");
  const WeightsDigest want = WeightsDigest::from_json(j, expected);
  c.digest = digest_weights(model_path, options);
  c.problems = compare_manifest(want, c.digest);
  c.summary = "manifest root " + to_hex(c.digest.root) + ": " + rate(c.digest);
  return c;
}

}  // namespace zen::attest
