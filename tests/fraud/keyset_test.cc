#include "fraud/keyset.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "common/durable_file.h"
#include "common/sha256.h"
#include "common/signing.h"
#include "fraud/card_token.h"
#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

constexpr char kPan[] = "4000001234567899";
const std::string kKekHex(64, 'a');

TEST(Keyset, ATokenCarriesItsKeyIdAndALegacyKeysTokenIsBareHex) {
  const Keyset keyset = Keyset::Generate(1);
  const std::string token = Keyset::TokenUnder(keyset.primary(), kPan);
  ASSERT_EQ(token.size(), 3u + 64u);
  EXPECT_EQ(token.substr(0, 3), "k1_");
  EXPECT_EQ(Keyset::KeyIdOf(token), "k1");
  const Keyset legacy = Keyset::Legacy(testing::TestCardKey());
  const std::string bare = Keyset::TokenUnder(legacy.primary(), kPan);
  EXPECT_EQ(bare.size(), 64u);
  EXPECT_EQ(Keyset::KeyIdOf(bare), kLegacyKeyId);
  // The legacy key tokenizes as the raw key file did before keysets.
  EXPECT_EQ(bare, CardTokenizer::FromKey(testing::TestCardKey())->Tokenize(kPan));
  EXPECT_EQ(Keyset::KeyIdOf("not-a-token"), "");
}

TEST(Keyset, RotationMakesANewPrimaryAndKeepsTheOldOneForLookups) {
  const Keyset first = Keyset::Generate(1);
  const Keyset second = first.Rotated(2);
  ASSERT_EQ(second.keys().size(), 2u);
  EXPECT_EQ(second.primary().id, "k2");
  EXPECT_EQ(second.keys()[0].state, KeyState::kActive);
  const auto tokenizer = CardTokenizer::FromKeyset(second.Rotated(3));
  const std::vector<std::string> candidates = tokenizer->Candidates(kPan);
  ASSERT_EQ(candidates.size(), 3u);  // k3 (primary), then k1 and k2 (active)
  EXPECT_EQ(candidates[0].substr(0, 3), "k3_");
  EXPECT_EQ(candidates[1], Keyset::TokenUnder(first.primary(), kPan));
  EXPECT_EQ(candidates[2].substr(0, 3), "k2_");
  // A retired key is never a candidate, and its tokens from callers are refused.
  const Keyset retired = second.Rotated(3).WithRetired("k1", 4).value();
  const auto after = CardTokenizer::FromKeyset(retired);
  EXPECT_EQ(after->Candidates(kPan).size(), 2u);
  EXPECT_TRUE(testing::IsError(after->CheckCallerToken(candidates[1]), ErrorCode::kInvalidArgument,
                               "was made with key k1, which is retired: tokenize with the primary key k3"));
  EXPECT_TRUE(after->CheckCallerToken(candidates[2]).ok());
  EXPECT_TRUE(after->CheckCallerToken("my-own-token-17").ok());
  EXPECT_TRUE(testing::IsError(second.WithRetired("k2", 4), ErrorCode::kInvalidArgument,
                               "key k2 is the primary key: rotate first (txscore keys rotate), then retire it"));
}

// The retirement time is what lets `txscore audit verify` refuse checkpoints a retired key
// signed afterwards: recorded once, kept through the file, refused on a key that is not retired.
TEST(Keyset, RetiringAKeyRecordsWhenAndTheFileKeepsIt) {
  testing::TempDir dir;
  const Keyset rotated = Keyset::Generate(5).Rotated(6);
  EXPECT_EQ(rotated.keys()[0].retired_ms, 0);
  const Keyset retired = rotated.WithRetired("k1", 7).value().WithRetired("k1", 9).value();
  EXPECT_EQ(retired.keys()[0].state, KeyState::kRetired);
  EXPECT_EQ(retired.keys()[0].retired_ms, 7);  // retiring again keeps the first time
  ASSERT_TRUE(SaveKeyset(retired, dir.file("keyset.json")).ok());
  const Keyset loaded = LoadKeyset(dir.file("keyset.json")).value();
  EXPECT_EQ(loaded.keys()[0].retired_ms, 7);
  EXPECT_EQ(loaded.keys()[1].retired_ms, 0);
  EXPECT_EQ(testing::ReadFile(dir.file("keyset.json")).find("\"retired_ms\""),
            testing::ReadFile(dir.file("keyset.json")).rfind("\"retired_ms\""));  // once: k1's alone
  const std::string forged = R"({"format": "txscore-keyset", "version": 1, "keys": [
      {"id": "k1", "state": "primary", "created_ms": 1, "retired_ms": 2, "secret_hex": ")" +
                             std::string(64, 'a') + R"("}]})";
  EXPECT_TRUE(testing::IsError(ParseKeyset(forged, "k.json"), ErrorCode::kInvalidArgument,
                               "k.json: key k1 has a retired_ms but its state is primary"));
}

// Kubelet mounts a Secret's files root-owned, mode 0440, group the pod's fsGroup, whatever the
// volume's defaultMode says: a non-root server in that group takes them; a file of a group it
// is not in, or one others may read, it still refuses.
TEST(Keyset, AKubernetesSecretOfThePodsGroupIsTakenByANonRootServer) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: it makes root-owned files and drops to another user";
  testing::TempDir dir;
  ::chmod(dir.path().c_str(), 0755);  // the pod's user must reach the file
  const std::string path = dir.file("keyset.json");
  ASSERT_TRUE(SaveKeyset(Keyset::Generate(1), path).ok());
  const auto loads_as_pod_user = [&path](gid_t file_group, mode_t mode) {
    ::chown(path.c_str(), 0, file_group);
    ::chmod(path.c_str(), mode);
    const pid_t child = ::fork();
    if (child == 0) {  // fsGroup 4242 as a supplementary group, runAsUser/runAsGroup 10001
      const gid_t fs_group = 4242;
      if (::setgroups(1, &fs_group) != 0 || ::setgid(10001) != 0 || ::setuid(10001) != 0) ::_exit(2);
      ::_exit(LoadKeyset(path).ok() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(loads_as_pod_user(4242, 0440), 0);
  EXPECT_EQ(loads_as_pod_user(4343, 0440), 1);  // a group it is not in
  EXPECT_EQ(loads_as_pod_user(4242, 0444), 1);  // others may read it too
  EXPECT_EQ(loads_as_pod_user(4242, 0460), 1);  // its group may write it
  // Root itself never takes a group-readable file: it shares group 0 with everything else root runs.
  ::chown(path.c_str(), 0, 0);
  EXPECT_FALSE(LoadKeyset(path).ok());
}

TEST(Keyset, AFileRoundTripsAndIsRefusedWhenOthersMayReadIt) {
  testing::TempDir dir;
  const Keyset keyset = Keyset::Generate(5).Rotated(6);
  ASSERT_TRUE(SaveKeyset(keyset, dir.file("keyset.json")).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("keyset.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const Keyset loaded = LoadKeyset(dir.file("keyset.json")).value();
  ASSERT_EQ(loaded.keys().size(), 2u);
  EXPECT_EQ(loaded.primary().id, "k2");
  EXPECT_EQ(loaded.keys()[0].secret, keyset.keys()[0].secret);
  EXPECT_EQ(loaded.keys()[1].created_ms, 6);
  for (const mode_t mode : {0644, 0640, 0604}) {  // others, group alone, others alone
    ::chmod(dir.file("keyset.json").c_str(), mode);
    EXPECT_TRUE(testing::IsError(LoadKeyset(dir.file("keyset.json")), ErrorCode::kFailedPrecondition,
                                 "keyset file " + dir.file("keyset.json") +
                                     " is readable by group or others; run: chmod 600 " + dir.file("keyset.json")))
        << std::oct << mode;
  }
}

// Someone else's file, or a file in a directory others may write to (they could replace it), is
// refused as a file others may read is.
TEST(Keyset, AKeysetOfAnotherUserOrInADirectoryOthersMayWriteIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("keys/keyset.json");
  std::filesystem::create_directories(dir.file("keys"));
  ::chmod(dir.file("keys").c_str(), 0700);
  ASSERT_TRUE(SaveKeyset(Keyset::Generate(1), path).ok());
  ASSERT_TRUE(LoadKeyset(path).ok());
  for (const mode_t mode : {0770, 0707}) {
    ::chmod(dir.file("keys").c_str(), mode);
    EXPECT_TRUE(testing::IsError(LoadKeyset(path), ErrorCode::kFailedPrecondition,
                                 "keyset file " + path +
                                     " lies in a directory group or others may write to, so they could replace it; "
                                     "run: chmod go-w " +
                                     dir.file("keys")))
        << std::oct << mode;
  }
  ::chmod(dir.file("keys").c_str(), 01777);  // sticky: others may add files, not replace this one
  EXPECT_TRUE(LoadKeyset(path).ok());
  ::chmod(dir.file("keys").c_str(), 0700);
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give the file to another user";
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  EXPECT_TRUE(
      testing::IsError(LoadKeyset(path), ErrorCode::kFailedPrecondition,
                       "keyset file " + path + " belongs to user 65534, not to this process's user 0 (or root)"));
}

// The keyset is written through a new file beside it (O_EXCL | O_NOFOLLOW), never through a file
// or a symbolic link someone put where that file goes between its removal and its creation.
TEST(Keyset, AKeysetIsWrittenThroughANewFileNeverThroughALinkPlantedThere) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("elsewhere"), "untouched");
  std::filesystem::create_symlink(dir.file("elsewhere"), dir.file("keyset.json.tmp"));
  EXPECT_TRUE(testing::IsError(WriteNewFileDurably(dir.file("keyset.json.tmp"), "secret"), ErrorCode::kInternal,
                               "cannot write " + dir.file("keyset.json.tmp") + ": File exists"));
  EXPECT_EQ(testing::ReadFile(dir.file("elsewhere")), "untouched");
  ASSERT_TRUE(SaveKeyset(Keyset::Generate(1), dir.file("keyset.json")).ok());  // removes what lay there first
  EXPECT_EQ(testing::ReadFile(dir.file("elsewhere")), "untouched");
  EXPECT_TRUE(LoadKeyset(dir.file("keyset.json")).ok());
}

TEST(Keyset, ARawKeyFileThatBeginsWithABraceIsARawKeyAndABrokenKeysetIsStillRefused) {
  testing::TempDir dir;
  // Random bytes begin with '{' in one file of 256 (it made a CI run fail): still a raw key.
  std::string raw = "{";
  for (int i = 0; i < 31; ++i) raw.push_back(static_cast<char>(0x80 + i * 3));
  testing::WriteFile(dir.file("card.key"), raw);
  ::chmod(dir.file("card.key").c_str(), 0600);
  Result<Keyset> legacy = LoadKeyset(dir.file("card.key"));
  ASSERT_TRUE(legacy.ok()) << legacy.error().ToString();
  EXPECT_EQ(legacy->primary().id, kLegacyKeyId);
  EXPECT_EQ(legacy->primary().secret, raw);
  // JSON text that does not parse is a broken keyset, never taken for a raw key.
  testing::WriteFile(dir.file("keyset.json"), "{\"format\": \"txscore-keyset\", \"version\": 1, \"keys\": [");
  ::chmod(dir.file("keyset.json").c_str(), 0600);
  EXPECT_TRUE(testing::IsError(LoadKeyset(dir.file("keyset.json")), ErrorCode::kInvalidArgument,
                               "keyset file " + dir.file("keyset.json") + ": not a JSON object"));
}

TEST(Keyset, ARawKeyOfLowEntropyIsRefusedAndARandomOneIsTaken) {
  testing::TempDir dir;
  const std::string path = dir.file("card.key");
  std::string sixteen;  // 16 distinct values, twice: enough values, but a pattern
  for (int i = 0; i < 16; ++i) sixteen.push_back(static_cast<char>(0x90 + i * 5));
  const struct {
    std::string key;
    std::string why;
  } kWeak[] = {
      {std::string(32, '\0'), "has only 1 distinct byte values (a random key has more)"},
      {std::string(32, 'k'), "has only 1 distinct byte values (a random key has more)"},
      {"012345" + std::string(26, '\xee'), "has only 7 distinct byte values (a random key has more)"},
      {sixteen + sixteen, "repeats a pattern of 16 bytes"},
      {sixteen + sixteen + sixteen.substr(0, 5), "repeats a pattern of 16 bytes"},
  };
  for (const auto& weak : kWeak) {
    testing::WriteFile(path, weak.key);
    ::chmod(path.c_str(), 0600);
    EXPECT_TRUE(testing::IsError(LoadKeyset(path), ErrorCode::kInvalidArgument,
                                 "card key file " + path + " " + weak.why +
                                     ": not a random key; make one with txscore keys create (or openssl rand -out " +
                                     path + " 32)"))
        << weak.why;
  }
  // 7 distinct values plus one more is enough, and so are 64 hex digits (16 values) and the
  // tests' key.
  testing::WriteFile(path, "0123456" + std::string(25, '\xee'));
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(LoadKeyset(path).ok());
  testing::WriteFile(path, "3f9a0c27b14e8d65f0a2c9e71b3d5846a7e2f09c1d4b6385e9f0a1c2d3b4e5f6\n");
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(LoadKeyset(path).ok());
  testing::WriteFile(path, testing::TestCardKey());
  ::chmod(path.c_str(), 0600);
  Result<Keyset> taken = LoadKeyset(path);
  ASSERT_TRUE(taken.ok()) << taken.error().ToString();
  EXPECT_EQ(taken->primary().secret, testing::TestCardKey());
}

TEST(Keyset, ADamagedKeysetIsRefusedAsDamagedNeverTakenForARawKey) {
  testing::TempDir dir;
  const std::string path = dir.file("keyset.json");
  ASSERT_TRUE(SaveKeyset(Keyset::Generate(1), path).ok());
  const std::string keyset = testing::ReadFile(path);
  const std::string kDamaged[] = {
      keyset + std::string(4096, '\0'),       // a torn write on a filesystem that pads
      "\xef\xbb\xbf" + keyset,                // a byte-order mark added by an editor
      keyset + std::string("\xff\0garbage"),  // bytes appended
  };
  for (const std::string& damaged : kDamaged) {
    for (const KeyFileForm form : {KeyFileForm::kKeysetOrRawKey, KeyFileForm::kKeysetOnly}) {
      testing::WriteFile(path, damaged);
      ::chmod(path.c_str(), 0600);
      EXPECT_TRUE(testing::IsError(LoadKeyset(path, {}, form), ErrorCode::kDataLoss,
                                   "keyset file " + path +
                                       " names the keyset format but is not a keyset's text (torn, padded with NUL "
                                       "bytes, or bytes added around it?): restore it from a backup"))
          << damaged.size() << " bytes";
    }
  }
  testing::WriteFile(path, keyset);
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(LoadKeyset(path).ok());
}

TEST(Keyset, WhereTheSettingsNameAKeysetARawKeyFileIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("card.key");
  testing::WriteFile(path, testing::TestCardKey());
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(testing::IsError(LoadKeyset(path, {}, KeyFileForm::kKeysetOnly), ErrorCode::kInvalidArgument,
                               "keyset file " + path +
                                   " is not a keyset (JSON text, from txscore keys create); a raw key file is read "
                                   "only when the settings name it as security.card_key_file"));
  EXPECT_TRUE(testing::IsError(CardTokenizer::FromKeyFile(path, {}, KeyFileForm::kKeysetOnly),
                               ErrorCode::kInvalidArgument,
                               "keyset file " + path +
                                   " is not a keyset (JSON text, from txscore keys create); a raw key file is read "
                                   "only when the settings name it as security.card_key_file"));
  EXPECT_TRUE(LoadKeyset(path, {}, KeyFileForm::kKeysetOrRawKey).ok());
  ASSERT_TRUE(SaveKeyset(Keyset::Generate(1), path).ok());
  EXPECT_TRUE(LoadKeyset(path, {}, KeyFileForm::kKeysetOnly).ok());
}

TEST(Keyset, MalformedKeysetsAreRefusedSayingWhy) {
  const std::string secret(64, '1');
  EXPECT_TRUE(testing::IsError(
      ParseKeyset(R"({"format":"txscore-keyset","version":1,"keys":[{"id":"k1","state":"active","secret_hex":")" +
                      secret + R"("}]})",
                  "f"),
      ErrorCode::kInvalidArgument, "f: a keyset needs exactly one primary key; this one has 0"));
  EXPECT_TRUE(testing::IsError(
      ParseKeyset(R"({"format":"txscore-keyset","version":1,"keys":[{"id":"K_1","state":"primary","secret_hex":")" +
                      secret + R"("}]})",
                  "f"),
      ErrorCode::kInvalidArgument, "f: key id \"K_1\" is not 1-32 characters of a-z, 0-9 and -"));
  EXPECT_TRUE(testing::IsError(
      ParseKeyset(R"({"format":"txscore-keyset","version":1,"keys":[{"id":"k1","state":"primary","secret_hex":"00"}]})",
                  "f"),
      ErrorCode::kInvalidArgument, "f: key \"k1\" has 1 secret bytes; a key has 32"));
}

TEST(Keyset, AWrappedKeysetHoldsNoSecretInClearAndOpensOnlyWithItsKek) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("kek"), kKekHex + "\n");
  ::chmod(dir.file("kek").c_str(), 0600);
  const KekSource kek{dir.file("kek"), ""};
  const Keyset keyset = Keyset::Generate(1);
  ASSERT_TRUE(SaveKeyset(keyset, dir.file("keyset.json"), kek).ok());
  const std::string on_disk = testing::ReadFile(dir.file("keyset.json"));
  EXPECT_TRUE(IsWrappedKeyset(on_disk));
  const std::string plain = SerializeKeyset(keyset);
  const std::string secret_hex = plain.substr(plain.find("secret_hex") + 14, 64);
  EXPECT_EQ(on_disk.find(secret_hex), std::string::npos);
  EXPECT_EQ(on_disk.find("\"k1\""), std::string::npos);  // not even the key ids
  EXPECT_EQ(LoadKeyset(dir.file("keyset.json"), kek).value().primary().secret, keyset.primary().secret);
  // The same KEK from the environment.
  ::setenv("TXSCORE_TEST_KEK", kKekHex.c_str(), 1);
  EXPECT_EQ(LoadKeyset(dir.file("keyset.json"), {"", "TXSCORE_TEST_KEK"}).value().primary().id, "k1");
  // Another KEK, no KEK, or one altered byte: refused.
  // (A variable is read once per process, then taken out of the environment: another name.)
  ::setenv("TXSCORE_TEST_OTHER_KEK", std::string(64, 'b').c_str(), 1);
  const std::string refused = "keyset file " + dir.file("keyset.json") +
                              ": cannot unwrap the keyset: the key-encryption key is not the one it was wrapped with, "
                              "or the file was altered";
  EXPECT_TRUE(testing::IsError(LoadKeyset(dir.file("keyset.json"), {"", "TXSCORE_TEST_OTHER_KEK"}),
                               ErrorCode::kInvalidArgument, refused));
  EXPECT_TRUE(testing::IsError(LoadKeyset(dir.file("keyset.json")), ErrorCode::kFailedPrecondition,
                               "keyset file " + dir.file("keyset.json") +
                                   " is wrapped: give its key-encryption key (security.kek_file or kek_env in the "
                                   "settings; --kek-file or --kek-env for txscore keys)"));
  std::string altered = on_disk;
  const size_t at = altered.find("ciphertext_hex") + 20;
  altered[at] = altered[at] == '0' ? '1' : '0';
  testing::WriteFile(dir.file("keyset.json"), altered);
  ::chmod(dir.file("keyset.json").c_str(), 0600);
  EXPECT_TRUE(testing::IsError(LoadKeyset(dir.file("keyset.json"), kek), ErrorCode::kInvalidArgument, refused));
  ::unsetenv("TXSCORE_TEST_KEK");
}

TEST(Keyset, WithAKekConfiguredAKeysetInClearIsRefused) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("kek"), kKekHex);
  ::chmod(dir.file("kek").c_str(), 0600);
  ASSERT_TRUE(SaveKeyset(Keyset::Generate(1), dir.file("keyset.json")).ok());  // in clear
  EXPECT_TRUE(testing::IsError(LoadKeyset(dir.file("keyset.json"), {dir.file("kek"), ""}),
                               ErrorCode::kFailedPrecondition,
                               "keyset file " + dir.file("keyset.json") +
                                   " is not wrapped, but a key-encryption key is configured: wrap it (txscore keys "
                                   "rotate --kek-file/--kek-env writes it wrapped) or drop kek_file/kek_env"));
  // A save replaces the file whole (written beside it, renamed over it): no temporary is left.
  ASSERT_TRUE(SaveKeyset(Keyset::Generate(2), dir.file("keyset.json"), {dir.file("kek"), ""}).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.file("keyset.json.tmp")));
  EXPECT_EQ(LoadKeyset(dir.file("keyset.json"), {dir.file("kek"), ""}).value().primary().created_ms, 2);
}

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) hex += {kDigits[c >> 4], kDigits[c & 15]};
  return hex;
}

// A keyset sealed as WrapKeyset seals one, but with `aad` as the additional data.
std::string SealedWithAad(const std::string& plain, const std::string& key, const std::string& aad) {
  const std::string nonce(12, '\x07');
  std::string ciphertext(plain.size(), '\0');
  unsigned char tag[16];
  int n = 0;
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  EXPECT_EQ(EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, reinterpret_cast<const unsigned char*>(key.data()),
                               reinterpret_cast<const unsigned char*>(nonce.data())),
            1);
  if (!aad.empty()) {
    EVP_EncryptUpdate(ctx, nullptr, &n, reinterpret_cast<const unsigned char*>(aad.data()),
                      static_cast<int>(aad.size()));
  }
  EVP_EncryptUpdate(ctx, reinterpret_cast<unsigned char*>(ciphertext.data()), &n,
                    reinterpret_cast<const unsigned char*>(plain.data()), static_cast<int>(plain.size()));
  EVP_EncryptFinal_ex(ctx, reinterpret_cast<unsigned char*>(ciphertext.data()) + n, &n);
  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag);
  EVP_CIPHER_CTX_free(ctx);
  return "{\"format\": \"txscore-keyset-wrapped\", \"version\": 1, \"algorithm\": \"AES-256-GCM\", \"nonce_hex\": \"" +
         Hex(nonce) + "\", \"ciphertext_hex\": \"" + Hex(ciphertext) + "\", \"tag_hex\": \"" +
         Hex(std::string(reinterpret_cast<const char*>(tag), 16)) + "\"}";
}

// The wrapped keyset's additional data binds the ciphertext to its format and version: the same
// key and ciphertext sealed under other (or no) additional data are refused, the right one opens.
TEST(Keyset, AWrappedKeysetOpensOnlyWithItsAdditionalData) {
  const std::string kek(32, '\xaa');  // kKekHex's bytes
  const std::string plain = SerializeKeyset(Keyset::Generate(1));
  EXPECT_TRUE(UnwrapKeyset(SealedWithAad(plain, kek, "txscore-keyset-wrapped/1"), kek, "f").ok());
  for (const std::string aad : {std::string(), std::string("txscore-keyset-wrapped/2"), std::string("x")}) {
    EXPECT_TRUE(testing::IsError(UnwrapKeyset(SealedWithAad(plain, kek, aad), kek, "f"), ErrorCode::kInvalidArgument,
                                 "f: cannot unwrap the keyset: the key-encryption key is not the one it was wrapped "
                                 "with, or the file was altered"))
        << aad;
  }
}

// A key-encryption key in the environment is taken out of it once read (no child process or
// reader of /proc/PID/environ sees it), wiped where it lay, and still found by a reload.
TEST(Keyset, AKekFromTheEnvironmentIsTakenOutOfItAndStillFoundByAReload) {
  ::setenv("TXSCORE_TEST_KEK_TAKEN", std::string(64, 'a').c_str(), 1);
  const char* lay = std::getenv("TXSCORE_TEST_KEK_TAKEN");
  Result<std::string> kek = LoadKek({"", "TXSCORE_TEST_KEK_TAKEN"});
  ASSERT_TRUE(kek.ok()) << kek.error().ToString();
  EXPECT_EQ(*kek, std::string(32, '\xaa'));
  EXPECT_EQ(std::getenv("TXSCORE_TEST_KEK_TAKEN"), nullptr);
  EXPECT_EQ(std::string(lay, 64), std::string(64, '\0'));  // glibc keeps setenv's string: read where it lay
  Result<std::string> again = LoadKek({"", "TXSCORE_TEST_KEK_TAKEN"});
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_EQ(*again, *kek);
}

TEST(Keyset, AKekMustBe64HexDigits) {
  ::setenv("TXSCORE_TEST_SHORT_KEK", "short", 1);
  EXPECT_TRUE(
      testing::IsError(LoadKek({"", "TXSCORE_TEST_SHORT_KEK"}), ErrorCode::kInvalidArgument,
                       "the environment variable TXSCORE_TEST_SHORT_KEK must hold 64 hex digits (32 bytes; openssl "
                       "rand -hex 32)"));
  ::unsetenv("TXSCORE_TEST_SHORT_KEK");
  EXPECT_TRUE(testing::IsError(LoadKek({"", "TXSCORE_TEST_SHORT_KEK"}), ErrorCode::kNotFound,
                               "the environment variable TXSCORE_TEST_SHORT_KEK (the key-encryption key) is not set"));
}

// Card tokens, claimant tokens and the audit signing key of a new key are three unrelated keys
// (HKDF with three labels), so a public key or a claimant key says nothing of the card key. A key
// from before purposes (no "derivation" in its file) tokenizes as it always did.
TEST(Keyset, EachPurposeOfANewKeyHasItsOwnKeyAndAKeyFromBeforeTokenizesAsItDid) {
  const Keyset keyset = Keyset::Generate(1);
  const KeysetKey& key = keyset.primary();
  ASSERT_TRUE(key.per_purpose);
  const auto hkdf = [&key](const char* label) { return HkdfSha256(key.secret, "txscore keyset", label, 32); };
  const auto token = [](const std::string& secret, std::string_view value) {
    return "k1_" + HexOfBytes(HmacSha256Bytes(secret, {value}));
  };
  const auto tokenizer = CardTokenizer::FromKeyset(keyset);
  EXPECT_EQ(tokenizer->Tokenize(kPan), token(hkdf("txscore card token key v1"), kPan));
  EXPECT_EQ(Keyset::TokenUnder(key, kPan), tokenizer->Tokenize(kPan));
  EXPECT_NE(tokenizer->Tokenize(kPan), token(key.secret, kPan));  // not under the secret itself
  EXPECT_EQ(tokenizer->TokenizeClaimant("C-1"), token(hkdf("txscore claimant token key v1"), "claimant:C-1"));
  EXPECT_EQ(Keyset::TokenUnder(key, "claimant:C-1", KeyPurpose::kClaimantToken), tokenizer->TokenizeClaimant("C-1"));
  EXPECT_NE(tokenizer->TokenizeClaimant("C-1"), token(hkdf("txscore card token key v1"), "claimant:C-1"));
  EXPECT_EQ(PurposeKey(key, KeyPurpose::kAuditSigning), hkdf("txscore audit signing key v1 (ed25519)"));
  EXPECT_EQ(AuditSigningPublicKey(key).value(),
            Ed25519PublicKey(hkdf("txscore audit signing key v1 (ed25519)")).value());

  // The same secret in a file written before purposes: tokens under the secret, as then.
  const std::string old_file = R"({"format": "txscore-keyset", "version": 1, "keys": [
      {"id": "k1", "state": "primary", "created_ms": 1, "secret_hex": ")" +
                               HexOfBytes(key.secret) + R"("}]})";
  const Keyset old_keys = ParseKeyset(old_file, "k.json").value();
  EXPECT_FALSE(old_keys.primary().per_purpose);
  const auto old_tokenizer = CardTokenizer::FromKeyset(old_keys);
  EXPECT_EQ(old_tokenizer->Tokenize(kPan), token(key.secret, kPan));
  EXPECT_EQ(old_tokenizer->TokenizeClaimant("C-1"), token(key.secret, "claimant:C-1"));
  // Its audit signing key is derived all the same: nothing signed with it before.
  EXPECT_EQ(PurposeKey(old_keys.primary(), KeyPurpose::kAuditSigning), hkdf("txscore audit signing key v1 (ed25519)"));
  // Rotating such a keyset gives a primary with purposes; the old key still resolves as before.
  const auto rotated = CardTokenizer::FromKeyset(old_keys.Rotated(2));
  EXPECT_TRUE(rotated->keyset().primary().per_purpose);
  EXPECT_EQ(rotated->Candidates(kPan)[1], token(key.secret, kPan));
}

TEST(Keyset, TheDerivationIsKeptByTheFileAndAReloadCannotChangeIt) {
  testing::TempDir dir;
  const Keyset keyset = Keyset::Generate(1);
  ASSERT_TRUE(SaveKeyset(keyset, dir.file("keyset.json")).ok());
  EXPECT_NE(testing::ReadFile(dir.file("keyset.json")).find("\"derivation\": \"hkdf-sha256\""), std::string::npos);
  const Keyset loaded = LoadKeyset(dir.file("keyset.json")).value();
  EXPECT_TRUE(loaded.primary().per_purpose);
  EXPECT_TRUE(CheckSuccessor(keyset, loaded).ok());
  // The same secret without its derivation would tokenize every card anew: refused at reload.
  KeysetKey stripped = keyset.primary();
  stripped.per_purpose = false;
  const Keyset without = Keyset::FromKeys({stripped}).value();
  EXPECT_TRUE(testing::IsError(CheckSuccessor(keyset, without), ErrorCode::kFailedPrecondition,
                               "the new keyset changes key k1's derivation, which would give every card under it a "
                               "new token: keep the key's \"derivation\" as it is (rotate to get a key with "
                               "purposes)"));
  const std::string unknown = R"({"format": "txscore-keyset", "version": 1, "keys": [
      {"id": "k1", "state": "primary", "derivation": "hkdf-sha512", "secret_hex": ")" +
                              std::string(64, 'a') + R"("}]})";
  EXPECT_TRUE(testing::IsError(ParseKeyset(unknown, "k.json"), ErrorCode::kInvalidArgument,
                               "k.json: key k1 has derivation \"hkdf-sha512\"; this version knows \"hkdf-sha256\" "
                               "(or none, for a key from before)"));
}

// What `txscore keys public` writes for an auditor: each key's Ed25519 public key and when it
// was retired, and nothing from which a token could be made.
TEST(Keyset, ThePublicKeyFileHoldsNoSecretAndRoundTrips) {
  testing::TempDir dir;
  const Keyset keyset = Keyset::Generate(1).Rotated(2).WithRetired("k1", 3).value();
  const std::string text = SerializeAuditPublicKeys(keyset).value();
  for (const KeysetKey& key : keyset.keys()) {
    for (const KeyPurpose purpose : {KeyPurpose::kCardToken, KeyPurpose::kClaimantToken, KeyPurpose::kAuditSigning}) {
      EXPECT_EQ(text.find(HexOfBytes(PurposeKey(key, purpose))), std::string::npos);
    }
    EXPECT_EQ(text.find(HexOfBytes(key.secret)), std::string::npos);
  }
  EXPECT_EQ(text.find("secret"), std::string::npos);
  testing::WriteFile(dir.file("public.json"), text);
  ::chmod(dir.file("public.json").c_str(), 0644);  // anyone may read a public key
  const std::vector<AuditPublicKey> keys = LoadAuditPublicKeys(dir.file("public.json")).value();
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].id, "k1");
  EXPECT_EQ(keys[0].state, KeyState::kRetired);
  EXPECT_EQ(keys[0].retired_ms, 3);
  EXPECT_EQ(keys[0].public_key, AuditSigningPublicKey(keyset.keys()[0]).value());
  EXPECT_EQ(keys[1].state, KeyState::kPrimary);
  EXPECT_EQ(keys[1].public_key, AuditSigningPublicKey(keyset.keys()[1]).value());
  // Whoever may write it could put their own key in: refused, for group and for others.
  for (const mode_t mode : {0664, 0646}) {
    ::chmod(dir.file("public.json").c_str(), mode);
    EXPECT_TRUE(testing::IsError(LoadAuditPublicKeys(dir.file("public.json")), ErrorCode::kFailedPrecondition,
                                 "public key file " + dir.file("public.json") +
                                     " may be written by group or others, who could put their own key in it; run: "
                                     "chmod go-w " +
                                     dir.file("public.json")));
  }
  EXPECT_TRUE(testing::IsError(ParseAuditPublicKeys(SerializeKeyset(keyset), "p.json"), ErrorCode::kInvalidArgument,
                               "p.json: not txscore audit public keys of version 1 (format "
                               "\"txscore-audit-public-keys\", version 1; txscore keys public writes them)"));
  // One id twice would let a second public key vouch for the checkpoints the first one signs.
  std::string twice = text;
  const std::string second_id = "\"id\": \"k2\"";
  const size_t k2 = twice.find(second_id);
  ASSERT_NE(k2, std::string::npos) << twice;
  twice.replace(k2, second_id.size(), "\"id\": \"k1\"");
  EXPECT_TRUE(testing::IsError(ParseAuditPublicKeys(twice, "p.json"), ErrorCode::kInvalidArgument,
                               "p.json: key id \"k1\" is malformed or appears twice"));
}

// Whoever could change the public-key file could put their own key in it and sign a forged
// trail: like a keyset, it is refused when another user owns it, when others may write to its
// directory (unless sticky), and when its name is a symbolic link (whose target was not checked).
TEST(Keyset, APublicKeyFileSomeoneElseCouldChangeIsRefused) {
  testing::TempDir dir;
  std::filesystem::create_directory(dir.file("keys"));
  const std::string path = dir.file("keys/public.json");
  testing::WriteFile(path, SerializeAuditPublicKeys(Keyset::Generate(1)).value());
  ::chmod(path.c_str(), 0644);
  ASSERT_TRUE(LoadAuditPublicKeys(path).ok());
  for (const mode_t mode : {0775, 0757}) {
    ::chmod(dir.file("keys").c_str(), mode);
    EXPECT_TRUE(testing::IsError(LoadAuditPublicKeys(path), ErrorCode::kFailedPrecondition,
                                 "public key file " + path +
                                     " lies in a directory group or others may write to, so they could replace it; "
                                     "run: chmod go-w " +
                                     dir.file("keys")))
        << std::oct << mode;
  }
  ::chmod(dir.file("keys").c_str(), 01777);  // sticky: others may add files, not replace this one
  EXPECT_TRUE(LoadAuditPublicKeys(path).ok());
  ::chmod(dir.file("keys").c_str(), 0755);
  std::filesystem::create_symlink(path, dir.file("keys/link.json"));
  EXPECT_TRUE(
      testing::IsError(LoadAuditPublicKeys(dir.file("keys/link.json")), ErrorCode::kInvalidArgument,
                       "public key file " + dir.file("keys/link.json") + " is a symbolic link; name the file itself"));
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give the file to another user";
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  EXPECT_TRUE(
      testing::IsError(LoadAuditPublicKeys(path), ErrorCode::kFailedPrecondition,
                       "public key file " + path + " belongs to user 65534, not to this process's user 0 (or root)"));
}

}  // namespace
}  // namespace txscore::fraud
