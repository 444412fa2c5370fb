#include "attest/crypto.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <vector>

#include "base/error.h"
#include "base/mmap.h"

namespace zen::attest {
namespace {

struct BioFree { void operator()(BIO* b) const { BIO_free(b); } };
struct PkeyFree { void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); } };
struct MdCtxFree { void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); } };
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

// ECDSA hashes with the digest that matches the curve's strength (as Sigstore and
// model-signing do); Ed25519 hashes internally (no digest is given to OpenSSL).
const EVP_MD* digest_for(EVP_PKEY* key) {
  if (EVP_PKEY_get_base_id(key) == EVP_PKEY_ED25519) return nullptr;
  const int bits = EVP_PKEY_get_bits(key);
  if (bits <= 256) return EVP_sha256();
  if (bits <= 384) return EVP_sha384();
  return EVP_sha512();
}

// The NIST curves by name: other curves of the same size (secp256k1, brainpoolP256r1) are
// not what the algorithm names promise.
void check_supported(EVP_PKEY* key, const std::string& what) {
  const int id = EVP_PKEY_get_base_id(key);
  if (id == EVP_PKEY_ED25519) return;
  if (id != EVP_PKEY_EC) fail(what, ": unsupported key type (need an EC P-256/P-384/P-521 or Ed25519 key)");
  char group[64] = {};
  size_t len = 0;
  if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group), &len) != 1)
    fail(what, ": an EC key without a named curve (need P-256, P-384 or P-521)");
  const std::string name(group, len);
  if (name != "prime256v1" && name != "secp384r1" && name != "secp521r1")
    fail(what, ": unsupported EC curve ", name, " (need P-256, P-384 or P-521)");
}

// Keys are read unencrypted: never let OpenSSL prompt for a passphrase on the terminal.
int no_passphrase(char*, int, int, void*) { return 0; }

}  // namespace

struct Sha256::State {
  MdCtxPtr ctx{EVP_MD_CTX_new()};
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  if (!state_->ctx || EVP_DigestInit_ex(state_->ctx.get(), EVP_sha256(), nullptr) != 1)
    fail("SHA-256: OpenSSL could not start a digest");
}
Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t n) {
  if (n > 0) EVP_DigestUpdate(state_->ctx.get(), data, n);
}

Digest Sha256::finish() {
  Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(state_->ctx.get(), d.data(), &len);
  return d;
}

Digest sha256(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.finish();
}

Digest sha256_file(const std::string& path) {
  MappedFile f(path);
  return sha256(f.data(), f.size());
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

Digest digest_from_hex(std::string_view hex, const std::string& what) {
  if (hex.starts_with("sha256:")) hex.remove_prefix(7);
  if (hex.size() != 64) fail(what, ": expected 64 hex digits (a SHA-256), got ", hex.size(), " characters");
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    fail(what, ": '", c, "' is not a hex digit");
  };
  Digest d{};
  for (size_t i = 0; i < 32; ++i) d[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return d;
}

std::string base64_encode(std::string_view bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string base64_decode(std::string_view text, const std::string& what) {
  if (text.size() % 4 != 0) fail(what, ": not base64 (length ", text.size(), " is not a multiple of 4)");
  auto value = [&](char c, size_t pos) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    fail(what, ": not base64 (character ", pos, " is not in the alphabet)");
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') fail(what, ": not base64 (misplaced padding)");
    uint32_t v = value(text[i], i) << 18 | value(text[i + 1], i + 1) << 12;
    if (pad < 2) v |= value(text[i + 2], i + 2) << 6;
    if (pad < 1) v |= value(text[i + 3], i + 3);
    out.push_back(char(v >> 16));
    if (pad < 2) out.push_back(char(v >> 8 & 255));
    if (pad < 1) out.push_back(char(v & 255));
  }
  return out;
}

std::string dsse_pae(std::string_view payload_type, std::string_view payload) {
  std::string s = "DSSEv1 " + std::to_string(payload_type.size()) + " ";
  s += payload_type;
  s += " " + std::to_string(payload.size()) + " ";
  s += payload;
  return s;
}

struct Key::Impl {
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey;
  bool is_private = false;
};

Key::Key(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Key::Key(Key&&) noexcept = default;
Key& Key::operator=(Key&&) noexcept = default;
Key::~Key() = default;

namespace {

std::unique_ptr<BIO, BioFree> memory_bio(std::string_view text) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string read_key_file(const std::string& path) {
  std::string text = read_text_file(path);
  if (text.size() > (1 << 20)) fail(path, ": not a PEM key (", text.size(), " bytes)");
  return text;
}

}  // namespace

Key Key::load_private_pem(const std::string& path) {
  const std::string text = read_key_file(path);
  auto bio = memory_bio(text);
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr);
  if (!k) fail(path, ": not an unencrypted PEM private key");
  auto impl = std::make_unique<Impl>();
  impl->pkey.reset(k);
  impl->is_private = true;
  check_supported(k, path);
  return Key(std::move(impl));
}

Key Key::from_public_pem_text(std::string_view pem) {
  auto bio = memory_bio(pem);
  EVP_PKEY* k = PEM_read_bio_PUBKEY(bio.get(), nullptr, no_passphrase, nullptr);
  if (!k) {
    auto again = memory_bio(pem);
    k = PEM_read_bio_PrivateKey(again.get(), nullptr, no_passphrase, nullptr);
  }
  if (!k) fail("not a PEM public key");
  auto impl = std::make_unique<Impl>();
  impl->pkey.reset(k);
  check_supported(k, "public key");
  return Key(std::move(impl));
}

Key Key::load_public_pem(const std::string& path) {
  try {
    return from_public_pem_text(read_key_file(path));
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
}

std::string Key::algorithm() const {
  EVP_PKEY* k = impl_->pkey.get();
  if (EVP_PKEY_get_base_id(k) == EVP_PKEY_ED25519) return "ed25519";
  const int bits = EVP_PKEY_get_bits(k);
  return "ecdsa-p" + std::to_string(bits) + "-sha" + std::to_string(bits <= 256 ? 256 : bits <= 384 ? 384 : 512);
}

std::string Key::key_id() const {
  unsigned char* der = nullptr;
  const int n = i2d_PUBKEY(impl_->pkey.get(), &der);
  if (n <= 0) fail("could not encode a public key");
  const std::string id = to_hex(sha256(der, static_cast<size_t>(n)));
  OPENSSL_free(der);
  return id;
}

std::string Key::public_pem() const {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_PUBKEY(bio.get(), impl_->pkey.get())) fail("could not write a public key");
  char* p = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &p);
  return std::string(p, static_cast<size_t>(n));
}

std::string Key::sign(std::string_view message) const {
  if (!impl_->is_private) fail("signing needs a private key");
  MdCtxPtr ctx(EVP_MD_CTX_new());
  EVP_PKEY* k = impl_->pkey.get();
  size_t len = 0;
  const auto* msg = reinterpret_cast<const unsigned char*>(message.data());
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, digest_for(k), nullptr, k) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, msg, message.size()) != 1)
    fail("signing failed (OpenSSL)");
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, msg, message.size()) != 1)
    fail("signing failed (OpenSSL)");
  sig.resize(len);
  return sig;
}

bool Key::verify(std::string_view message, std::string_view signature) const {
  MdCtxPtr ctx(EVP_MD_CTX_new());
  EVP_PKEY* k = impl_->pkey.get();
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, digest_for(k), nullptr, k) != 1) return false;
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                          reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
}

}  // namespace zen::attest
