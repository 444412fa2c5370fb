// The canonical digest, its primitives and signed attestations (the Python test
// tests/test_weights_hash.py checks the same encoding with an independent implementation).
#include <atomic>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "attest/attestation.h"
#include "attest/crypto.h"
#include "attest/digest.h"
#include "base/error.h"
#include "base/mmap.h"
#include "io/io_test_writers.h"

namespace zen::attest {
namespace {

namespace fs = std::filesystem;
using testing_io::GgufBuilder;
using testing_io::SafetensorsBuilder;
using testing_io::temp_path;
using testing_io::write_file;

#define EXPECT_ERROR_WITH(stmt, text)                                             \
  do {                                                                            \
    try {                                                                         \
      stmt;                                                                       \
      ADD_FAILURE() << "no error from " #stmt;                                    \
    } catch (const Error& e) {                                                    \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what(); \
    }                                                                             \
  } while (0)

TEST(AttestCrypto, Sha256MatchesFipsVectors) {
  EXPECT_EQ(to_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 h;  // streamed in pieces: the same
  h.update("a");
  h.update("bc");
  EXPECT_EQ(h.finish(), sha256("abc"));
}

TEST(AttestCrypto, HexRoundTripAndRefusals) {
  const Digest d = sha256("x");
  EXPECT_EQ(digest_from_hex(to_hex(d), "t"), d);
  std::string upper = to_hex(d);
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  EXPECT_EQ(digest_from_hex(upper, "t"), d);
  EXPECT_ERROR_WITH(digest_from_hex("abc", "root"), "root: expected 64 hex digits");
  EXPECT_ERROR_WITH(digest_from_hex(std::string(63, 'a') + "g", "root"), "not a hex digit");
}

TEST(AttestCrypto, Base64RoundTripsEveryLengthAndRefusesJunk) {
  std::mt19937 rng(7);
  for (size_t n = 0; n < 40; ++n) {
    std::string bytes(n, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    EXPECT_EQ(base64_decode(base64_encode(bytes), "t"), bytes) << n;
  }
  EXPECT_EQ(base64_encode("hello world"), "aGVsbG8gd29ybGQ=");  // RFC 4648 alphabet
  EXPECT_ERROR_WITH(base64_decode("abc", "payload"), "payload: not base64");
  EXPECT_ERROR_WITH(base64_decode("ab!d", "payload"), "not in the alphabet");
  EXPECT_ERROR_WITH(base64_decode("a=bc", "payload"), "not base64");
  EXPECT_ERROR_WITH(base64_decode("ab=c", "payload"), "not base64");
}

TEST(AttestCrypto, PaeIsDsseV1) {
  // The example of the DSSE protocol document.
  EXPECT_EQ(dsse_pae("http://example.com/HelloWorld", "hello world"),
            "DSSEv1 29 http://example.com/HelloWorld 11 hello world");
}

// A fresh key of `type` written as PEM (private and public) under the test temp dir.
struct TestKey {
  std::string private_pem, public_pem;
};
TestKey make_key(bool ed25519) {
  EVP_PKEY* k = ed25519 ? EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519") : EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  ZEN_CHECK(k != nullptr);
  TestKey t{temp_path("key.pem"), temp_path("pub.pem")};
  FILE* f = std::fopen(t.private_pem.c_str(), "w");
  PEM_write_PrivateKey(f, k, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  f = std::fopen(t.public_pem.c_str(), "w");
  PEM_write_PUBKEY(f, k);
  std::fclose(f);
  EVP_PKEY_free(k);
  return t;
}

TEST(AttestCrypto, KeysSignAndVerify) {
  for (bool ed : {false, true}) {
    const TestKey t = make_key(ed);
    const Key priv = Key::load_private_pem(t.private_pem);
    const Key pub = Key::load_public_pem(t.public_pem);
    EXPECT_EQ(priv.algorithm(), ed ? "ed25519" : "ecdsa-p256-sha256");
    EXPECT_EQ(priv.key_id(), pub.key_id());
    const std::string sig = priv.sign("message");
    EXPECT_TRUE(pub.verify("message", sig));
    EXPECT_FALSE(pub.verify("messagE", sig));
    std::string bad = sig;
    bad[bad.size() / 2] ^= 1;
    EXPECT_FALSE(pub.verify("message", bad));
    EXPECT_FALSE(Key::load_public_pem(make_key(ed).public_pem).verify("message", sig)) << "another key";
    EXPECT_ERROR_WITH(pub.sign("x"), "needs a private key");
  }
  // A 256-bit curve that is not P-256 is refused by name.
  EVP_PKEY* k1 = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "secp256k1");
  const std::string k1_path = temp_path("k1.pem");
  FILE* f = std::fopen(k1_path.c_str(), "w");
  PEM_write_PrivateKey(f, k1, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  EVP_PKEY_free(k1);
  EXPECT_ERROR_WITH(Key::load_private_pem(k1_path), "unsupported EC curve secp256k1");
  const std::string junk = temp_path("junk.pem");
  write_file(junk, "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n");
  EXPECT_ERROR_WITH(Key::load_public_pem(junk), "not a PEM public key");
  EXPECT_ERROR_WITH(Key::load_private_pem(junk), "not an unencrypted PEM private key");
}

// RFC 6962's tree built another way: leaves pushed on a stack, equal-sized neighbours merged
// as they complete, the leftover subtrees folded from the right.
Digest incremental_root(const std::vector<Digest>& leaves) {
  auto node = [](const Digest& l, const Digest& r) {
    std::string s(1, '\x01');
    s.append(reinterpret_cast<const char*>(l.data()), 32);
    s.append(reinterpret_cast<const char*>(r.data()), 32);
    return sha256(s);
  };
  std::vector<std::pair<size_t, Digest>> stack;
  for (const Digest& leaf : leaves) {
    stack.push_back({1, leaf});
    while (stack.size() >= 2 && stack[stack.size() - 2].first == stack.back().first) {
      auto right = stack.back();
      stack.pop_back();
      stack.back() = {2 * right.first, node(stack.back().second, right.second)};
    }
  }
  Digest acc = stack.back().second;
  for (size_t i = stack.size() - 1; i-- > 0;) acc = node(stack[i].second, acc);
  return acc;
}

TEST(AttestDigest, MerkleRootIsRfc6962) {
  std::vector<Digest> leaves;
  for (int n = 1; n <= 33; ++n) {
    leaves.push_back(sha256(std::to_string(n)));
    EXPECT_EQ(merkle_root(leaves), incremental_root(leaves)) << n << " leaves";
  }
}

TEST(AttestDigest, LeafEncodesNameDtypeShapeAndBytes) {
  const std::string bytes = "\x01\x02\x03\x04\x05\x06\x07\x08";
  TensorView t{"w", DType::F16, {2, 2}, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  std::string enc("\x00zen-weights-v1\x00", 16);
  auto u64 = [&](uint64_t v) { testing_io::put_u64(enc, v); };
  u64(1), enc += "w", u64(3), enc += "F16", u64(2), u64(2), u64(2), u64(8), enc += bytes;
  EXPECT_EQ(tensor_leaf(t), sha256(enc));
  TensorView renamed = t, reshaped = t, retyped = t;
  renamed.name = "v";
  reshaped.shape = {4, 1};
  retyped.dtype = DType::BF16;
  for (const TensorView* other : {&renamed, &reshaped, &retyped}) EXPECT_NE(tensor_leaf(*other), tensor_leaf(t));
}

// Three tensors as one file, as two shards (other order, metadata, an index), and as GGUF.
struct Layouts {
  std::string single, sharded, gguf;
};
Layouts write_layouts() {
  Layouts l{temp_path("one.safetensors"), temp_path("sharded"), temp_path("m.gguf")};
  SafetensorsBuilder one;
  one.add("a.weight", "F32", {3, 4});
  one.add("b.bias", "F32", {5});
  one.add("c.weight", "F32", {2, 2, 2});
  write_file(l.single, one.build());
  fs::create_directories(l.sharded);
  // The builder fills tensor i with bytes i + 1: shard two repeats a and b's contents, and
  // c's (3s) is written by hand after a header padded with spaces.
  SafetensorsBuilder s1, s2;
  s1.add("c.weight", "F32", {2, 2, 2});
  s2.add("a.weight", "F32", {3, 4});
  s2.add("b.bias", "F32", {5});
  s2.metadata = {{"format", "pt"}, {"note", "shard two"}};
  std::string c_data(32, '\x03');
  write_file(l.sharded + "/model-00001-of-00002.safetensors", testing_io::safetensors_bytes(s1.header_json() + "    ", c_data));
  write_file(l.sharded + "/model-00002-of-00002.safetensors", s2.build());
  write_file(l.sharded + "/model.safetensors.index.json",
             R"({"metadata": {}, "weight_map": {"a.weight": "model-00002-of-00002.safetensors",
                 "b.bias": "model-00002-of-00002.safetensors", "c.weight": "model-00001-of-00002.safetensors"}})");
  write_file(l.sharded + "/config.json", R"({"model_type": "test"})");
  GgufBuilder g;
  g.add_tensor("a.weight", {4, 3});
  g.add_tensor("b.bias", {5});
  g.add_tensor("c.weight", {2, 2, 2});
  write_file(l.gguf, g.build());
  return l;
}

TEST(AttestDigest, RootIgnoresLayoutAndFormat) {
  const Layouts l = write_layouts();
  const WeightsDigest one = digest_weights(l.single, {1, true});
  const WeightsDigest sharded = digest_weights(l.sharded, {2, true});
  const WeightsDigest gguf = digest_weights(l.gguf, {3, true});
  EXPECT_EQ(one.format, "safetensors");
  EXPECT_EQ(gguf.format, "gguf");
  ASSERT_EQ(one.tensors.size(), 3u);
  EXPECT_EQ(one.root, sharded.root);
  EXPECT_EQ(one.root, gguf.root);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(one.tensors[i].leaf, gguf.tensors[i].leaf) << one.tensors[i].name;
    EXPECT_EQ(one.tensors[i].shape, gguf.tensors[i].shape) << one.tensors[i].name;
  }
  // Files: both shards (weights) and config.json, each the plain SHA-256 of the file.
  ASSERT_EQ(sharded.files.size(), 3u);
  EXPECT_EQ(sharded.files[2].path, "config.json");
  EXPECT_EQ(sharded.files[2].role, "config");
  for (const FileDigest& f : sharded.files) EXPECT_EQ(f.sha256, sha256_file(l.sharded + "/" + f.path)) << f.path;
}

TEST(AttestDigest, ACancelledDigestStopsAndSaysSo) {
  const Layouts l = write_layouts();
  std::atomic<bool> cancel{true};
  DigestOptions o{1, true};
  o.cancel = &cancel;
  try {
    digest_weights(l.single, o);
    FAIL() << "a cancelled digest finished";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weights digest cancelled"), std::string::npos) << e.what();
  }
  cancel = false;  // the same options, not cancelled: the usual root
  EXPECT_EQ(digest_weights(l.single, o).root, digest_weights(l.single, {1, true}).root);
}

TEST(AttestDigest, ManifestNamesWhatChanged) {
  const Layouts l = write_layouts();
  const WeightsDigest before = digest_weights(l.sharded);
  const WeightsDigest reread = WeightsDigest::from_json(nlohmann::json::parse(before.to_json().dump()), "m");
  EXPECT_EQ(reread.root, before.root);
  EXPECT_TRUE(compare_manifest(reread, before).empty());

  // One byte of b.bias flipped (the last byte of shard two).
  const std::string shard = l.sharded + "/model-00002-of-00002.safetensors";
  std::string bytes = read_text_file(shard);
  bytes.back() ^= 1;
  write_file(shard, bytes);
  const WeightsDigest after = digest_weights(l.sharded);
  EXPECT_NE(after.root, before.root);
  EXPECT_EQ(compare_manifest(before, after), std::vector<std::string>{"tensor b.bias: differs: contents"});
  write_file(l.sharded + "/config.json", "{}");
  const auto problems = compare_manifest(before, digest_weights(l.sharded));
  EXPECT_EQ(problems.back(), "file config.json: differs from the manifest");
  write_file(l.sharded + "/chat_template.jinja", "{{ messages }}");  // added later: changes the prompts
  EXPECT_EQ(compare_manifest(before, digest_weights(l.sharded)).back(), "file chat_template.jinja: extra (not in the manifest)");
}

TEST(AttestDigest, HostileManifestsAreRefused) {
  const Layouts l = write_layouts();
  const nlohmann::json good = digest_weights(l.single).to_json();
  auto with = [&](const std::string& pointer, const nlohmann::json& v) {
    nlohmann::json j = good;
    j[nlohmann::json::json_pointer(pointer)] = v;
    return j;
  };
  EXPECT_ERROR_WITH(WeightsDigest::from_json(nlohmann::json::array(), "m"), "a manifest is a JSON object");
  EXPECT_ERROR_WITH(WeightsDigest::from_json(with("/root", 5), "m"), "'root' has the wrong type");
  EXPECT_ERROR_WITH(WeightsDigest::from_json(with("/tensors", nlohmann::json::object()), "m"), "'tensors' has the wrong type");
  EXPECT_ERROR_WITH(WeightsDigest::from_json(with("/tensors/0/shape/0", "x"), "m"), "shape holds something");
  EXPECT_ERROR_WITH(WeightsDigest::from_json(with("/tensors/0/leaf", std::string(63, 'a')), "m"), "expected 64 hex digits");
  EXPECT_ERROR_WITH(WeightsDigest::from_json(with("/tensors/1/name", "a.weight"), "m"), "sorted and unique");
  EXPECT_ERROR_WITH(WeightsDigest::from_json(with("/canonicalization", "zen-weights-v0"), "m"), "not one this zen computes");
  EXPECT_ERROR_WITH(WeightsDigest::from_json(with("/tensors/0/leaf", good["tensors"][1]["leaf"]), "m"), "do not hash to its root");
}

TEST(AttestAttestation, RoundTripAndRefusals) {
  const Layouts l = write_layouts();
  const WeightsDigest d = digest_weights(l.sharded, {0, false});
  const TestKey key = make_key(false);
  const Key signer = Key::load_private_pem(key.private_pem);
  const Key pub = Key::load_public_pem(key.public_pem);
  AttestOptions o;
  o.training_config_sha256 = "sha256:" + to_hex(sha256("train.yaml"));
  o.benchmarks = {{"mmlu", 0.5}};
  const nlohmann::json statement = make_statement(d, o);
  const std::string envelope = sign_statement(statement, signer);
  const Attestation a = open_attestation(envelope, pub, "att");
  EXPECT_EQ(a.root, d.root);
  ASSERT_EQ(a.files.size(), 1u);
  EXPECT_EQ(a.files[0].path, "config.json");
  EXPECT_TRUE(compare_attestation(a, d).empty());
  EXPECT_EQ(a.statement["predicate"]["benchmarks"]["mmlu"], 0.5);

  EXPECT_ERROR_WITH(open_attestation(envelope, Key::load_public_pem(make_key(true).public_pem), "att"), "does not verify");
  nlohmann::json env = nlohmann::json::parse(envelope);
  nlohmann::json edited = statement;
  edited["subject"][0]["digest"]["sha256"] = to_hex(sha256("other"));
  env["payload"] = base64_encode(edited.dump());
  EXPECT_ERROR_WITH(open_attestation(env.dump(), pub, "att"), "does not verify");
  env = nlohmann::json::parse(envelope);
  std::string sig = base64_decode(env["signatures"][0]["sig"].get<std::string>(), "sig");
  sig[5] ^= 1;
  env["signatures"][0]["sig"] = base64_encode(sig);
  EXPECT_ERROR_WITH(open_attestation(env.dump(), pub, "att"), "does not verify");
  edited = statement;
  edited["predicate"]["canonicalization"] = "zen-weights-v0";
  EXPECT_ERROR_WITH(open_attestation(sign_statement(edited, signer), pub, "att"), "attests canonicalization 'zen-weights-v0'");
  edited = statement;
  edited["subject"].erase(0);
  EXPECT_ERROR_WITH(open_attestation(sign_statement(edited, signer), pub, "att"), "no 'weights' subject");
  EXPECT_ERROR_WITH(open_attestation("{", pub, "att"), "not JSON");
  EXPECT_ERROR_WITH(open_attestation(R"({"payloadType": "application/vnd.in-toto+json", "payload": "", "signatures": []})", pub, "att"),
                    "'signatures' is not a non-empty array");
  EXPECT_ERROR_WITH(open_attestation(std::string(17 << 20, ' '), pub, "att"), "too large");

  // The checkpoint changes after attesting: a tensor, then the config.
  const std::string shard = l.sharded + "/model-00001-of-00002.safetensors";
  std::string bytes = read_text_file(shard);
  bytes.back() ^= 1;
  write_file(shard, bytes);
  EXPECT_EQ(compare_attestation(a, digest_weights(l.sharded)).size(), 1u);
  bytes.back() ^= 1;
  write_file(shard, bytes);
  write_file(l.sharded + "/config.json", "{}");
  EXPECT_EQ(compare_attestation(a, digest_weights(l.sharded)), std::vector<std::string>{"file config.json: differs from the attestation"});
}

TEST(AttestDigest, BadPathsAreRefused) {
  EXPECT_ERROR_WITH(digest_weights(temp_path("absent.gguf")), "No such file");
  const std::string empty_dir = temp_path("empty");
  fs::create_directories(empty_dir);
  EXPECT_ERROR_WITH(digest_weights(empty_dir), "no weights");
  const Layouts l = write_layouts();
  write_file(l.sharded + "/model.safetensors.index.json", R"({"weight_map": {"a.weight": "model-00001-of-00002.safetensors"}})");
  EXPECT_ERROR_WITH(digest_weights(l.sharded), "is not in the index's weight_map");
  write_file(l.sharded + "/model.safetensors.index.json", R"({"weight_map": {"a.weight": "../x.safetensors"}})");
  EXPECT_ERROR_WITH(digest_weights(l.sharded), "does not name a shard file");
}

}  // namespace
}  // namespace zen::attest
