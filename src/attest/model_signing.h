// Verifies OpenSSF model-signing (sigstore/model-transparency, `model_signing sign key`)
// signatures natively. What its 1.x private-key flow writes, as read from model-signing 1.1.1:
//
// - The signature file is a Sigstore bundle in JSON: mediaType
//   "application/vnd.dev.sigstore.bundle.v0.3+json", verificationMaterial.publicKey.hint =
//   hex SHA-256 of the signer's public key PEM (SubjectPublicKeyInfo, as OpenSSL writes it;
//   unsigned, so only a hint here), tlogEntries [], and dsseEnvelope {payload: base64 of the
//   statement JSON, payloadType "application/vnd.in-toto+json", signatures: [{sig: base64,
//   keyid: ""}]}. Base64 is standard with padding, one layer.
// - sig is a DER ECDSA signature over the DSSE v1 PAE of (payloadType, payload bytes), hashed
//   with SHA-256 for P-256, SHA-384 for P-384, SHA-512 for P-521 (the only curves it takes);
//   Key::verify picks the same digest. The pre-1.0 "DSSEV1 ... b'...'" PAE bug is not
//   accepted here; neither is the v0.2 predicate "https://model_signing/Digests/v0.1".
// - The payload is an in-toto Statement v1 ("_type": "https://in-toto.io/Statement/v1") with
//   predicateType "https://model_signing/signature/v1.0", one subject {name: the model folder's
//   last component, digest.sha256: SHA-256 over the concatenated raw 32-byte resource digests in
//   the order listed}, and predicate {serialization, resources: [{name, algorithm, digest
//   (hex)}]} sorted by name. Other predicate fields are to be ignored.
// - serialization {method "files" | "shards", hash_type "sha256" | "blake2" | "blake3",
//   allow_symlinks bool, ignore_paths [relative paths] (optional), shard_size (shards only; a
//   JSON number, written as 1000.0)}. Only sha256 is verified here.
// - "files": every regular file under the folder, recursively (dotfiles included, symlinked
//   folders not entered), relative POSIX path as name, algorithm "sha256", digest = plain
//   SHA-256 of the bytes (sha256sum). Empty files are included. A single-file model is one
//   resource named ".". "shards": name "PATH:START:END", algorithm "sha256-sharded-SIZE",
//   SHA-256 of bytes [START, END), shards [0,S) [S,2S) ... the last ending at the file size;
//   empty files have no shards. (model-signing 1.1.1's own verifier fails on shard signatures:
//   it passes the float shard_size to range().)
// - Ignored: a path equal to an ignore path or below it (component-wise). The signer records
//   its ignore list, which by default (and at verification always) holds .git, .gitattributes,
//   .github and .gitignore; its CLI adds the signature file when it lies in the folder. Every
//   other file present and not signed fails verification, like a missing or changed one.
//
// Here, listed resources are always checked, even under an ignored path; the signature file
// itself is never counted as an unsigned file.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "attest/crypto.h"

namespace zen::attest {

struct ModelSigningReport {
  std::string model_name;             // the statement's subject name ("" if the signature fails)
  size_t files_checked = 0;           // signed files whose bytes were hashed
  std::vector<std::string> problems;  // empty = verified; one line each, naming the file
  bool ok() const { return problems.empty(); }
};

// MODEL_DIR: the signed folder (or the single signed file). Checks the signature first (and
// stops there if it fails), then the subject digest against the resources, every resource's
// bytes, and files present but not signed. Throws zen::Error with a clear message for a
// malformed or hostile signature file (not JSON, wrong types, missing fields, over 64 MiB,
// another payloadType, predicateType, serialization or hash, bad base64 or hex, names that
// leave the folder) and for a MODEL_DIR that does not exist.
ModelSigningReport verify_model_signing(const std::string& model_dir, const std::string& signature_path,
                                        const Key& public_key);

}  // namespace zen::attest
