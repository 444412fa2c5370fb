// The few cryptographic primitives attestation needs, over OpenSSL's libcrypto: SHA-256 (which
// uses the CPU's SHA extensions where it has them), hex and base64, DSSE's pre-authentication
// encoding, and PEM keys that sign and verify (EC P-256/P-384/P-521 with ECDSA over SHA-256/
// 384/512 by curve size, or Ed25519). Bad keys, encodings and signatures throw zen::Error or
// return false; nothing here crashes on input.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace zen::attest {

using Digest = std::array<uint8_t, 32>;

// Streaming SHA-256.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest finish();  // once

 private:
  struct State;
  std::unique_ptr<State> state_;
};

Digest sha256(const void* data, size_t n);
inline Digest sha256(std::string_view s) { return sha256(s.data(), s.size()); }
// SHA-256 of a whole file's bytes (what `sha256sum` prints), streamed from a mapping.
Digest sha256_file(const std::string& path);

std::string to_hex(const uint8_t* p, size_t n);
inline std::string to_hex(const Digest& d) { return to_hex(d.data(), d.size()); }
// 64 hex digits (either case), optionally prefixed "sha256:", to a digest; throws naming
// `what` otherwise.
Digest digest_from_hex(std::string_view hex, const std::string& what);

std::string base64_encode(std::string_view bytes);
// Standard alphabet with padding (DSSE, Sigstore bundles); whitespace is not allowed.
// Throws naming `what` on anything else.
std::string base64_decode(std::string_view text, const std::string& what);

// DSSE v1 pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
std::string dsse_pae(std::string_view payload_type, std::string_view payload);

// A PEM key: private (signs and verifies) or public (verifies).
class Key {
 public:
  static Key load_private_pem(const std::string& path);  // throws naming the file
  static Key load_public_pem(const std::string& path);   // also takes a private key's PEM
  static Key from_public_pem_text(std::string_view pem);  // throws
  Key(Key&&) noexcept;
  Key& operator=(Key&&) noexcept;
  ~Key();

  std::string algorithm() const;  // "ecdsa-p256-sha256", "ed25519", ...
  std::string key_id() const;     // hex SHA-256 of the DER SubjectPublicKeyInfo
  std::string public_pem() const;
  std::string sign(std::string_view message) const;  // DER ECDSA or raw Ed25519 signature
  bool verify(std::string_view message, std::string_view signature) const;

 private:
  struct Impl;
  explicit Key(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zen::attest
