// Signed weight attestations: an in-toto Statement v1 whose subjects are the canonical weights
// root (digest.h) and the config and tokenizer files' SHA-256s, with a predicate naming the
// canonicalization, the format and optional training-config hash and benchmark results, in a
// DSSE envelope signed with an EC or Ed25519 key. This is the record a ledger would store;
// checking it needs only the public key, offline.
//
//   {"payloadType": "application/vnd.in-toto+json", "payload": base64(statement),
//    "signatures": [{"keyid": hex SHA-256 of the public key's DER, "sig": base64}]}
// The signature covers DSSE's PAE(payloadType, payload).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attest/crypto.h"
#include "attest/digest.h"

namespace zen::attest {

inline constexpr const char* kStatementType = "https://in-toto.io/Statement/v1";
inline constexpr const char* kPredicateType = "https://github.com/zen-engine/attestation/weights/v1";
inline constexpr const char* kInTotoPayloadType = "application/vnd.in-toto+json";
inline constexpr const char* kWeightsSubject = "weights";

struct AttestOptions {
  std::string training_config_sha256;  // hex; empty: not recorded
  nlohmann::json benchmarks;           // null: not recorded
};

// The statement for a digest (its subjects and predicate).
nlohmann::json make_statement(const WeightsDigest& d, const AttestOptions& options);
// The signed DSSE envelope, as JSON text.
std::string sign_statement(const nlohmann::json& statement, const Key& key);

// A checked envelope: the signature verified with the key, the statement well formed and of a
// version this zen understands. Throws zen::Error saying which of those failed.
struct Attestation {
  nlohmann::json statement;
  Digest root{};
  std::vector<FileDigest> files;  // the config and tokenizer subjects
  std::string key_id;
};
Attestation open_attestation(const std::string& envelope_text, const Key& public_key, const std::string& what);
// The statement part alone (the payload, once its signature verified).
Attestation parse_statement(const std::string& payload, const std::string& what);

// What differs between an attestation's subjects and a computed digest; empty when all match.
std::vector<std::string> compare_attestation(const Attestation& a, const WeightsDigest& actual);

// One entry point for `zen verify` and `--verify-weights`: EXPECTED is a root (64 hex digits,
// optionally "sha256:"-prefixed), a manifest file (zen hash --json) or an attestation file
// (needs public_key_path). Computes the checkpoint's digest and returns the problems (empty
// when it matches) and a one-line summary of what was checked and how long it took.
struct WeightsCheck {
  std::vector<std::string> problems;
  std::string summary;
  WeightsDigest digest;
  bool ok() const { return problems.empty(); }
};
WeightsCheck check_weights(const std::string& model_path, const std::string& expected,
                           const std::string& public_key_path, int threads);

}  // namespace zen::attest
