#include "llm/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/bytes.h"
#include "tests/test_support.h"

namespace txscore::llm {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    testing::WriteFile(dir_.file(name), bytes);
    return dir_.file(name);
  }
  Error OpenError(const std::string& bytes) {
    auto file = SafetensorsFile::Open(Write("bad.safetensors", bytes));
    EXPECT_FALSE(file.ok());
    return file.ok() ? Error{} : file.error();
  }
  testing::TempDir dir_;
};

TEST_F(SafetensorsTest, WriterOutputReadsBackWithEveryFloatType) {
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.AddFloats("a.weight", DType::kF32, {2, 2}, {1.0f, -2.5f, 3.25f, 0.0f}).ok());
  ASSERT_TRUE(writer.AddFloats("b.weight", DType::kBF16, {3}, {1.0f, -2.0f, 0.5f}).ok());
  ASSERT_TRUE(writer.AddFloats("c.weight", DType::kF16, {2}, {1.0f, 65504.0f}).ok());
  writer.SetMetadata("format", "pt");
  ASSERT_TRUE(writer.Write(dir_.file("model.safetensors")).ok());

  auto file = SafetensorsFile::Open(dir_.file("model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.error().ToString();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  ASSERT_EQ((*file)->tensors().size(), 3u);
  const TensorInfo* a = (*file)->Find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a->size_bytes, 16u);
  std::vector<float> values;
  ASSERT_TRUE(DecodeToFloat((*file)->View(*a), &values).ok());
  EXPECT_EQ(values, (std::vector<float>{1.0f, -2.5f, 3.25f, 0.0f}));
  ASSERT_TRUE(DecodeToFloat((*file)->View(*(*file)->Find("b.weight")), &values).ok());
  EXPECT_EQ(values, (std::vector<float>{1.0f, -2.0f, 0.5f}));
  ASSERT_TRUE(DecodeToFloat((*file)->View(*(*file)->Find("c.weight")), &values).ok());
  EXPECT_EQ(values, (std::vector<float>{1.0f, 65504.0f}));
  EXPECT_EQ((*file)->Find("absent"), nullptr);
}

TEST_F(SafetensorsTest, RejectsFileShorterThanTheLengthPrefix) {
  EXPECT_EQ(OpenError("abc").message, dir_.file("bad.safetensors") + ": 3 bytes is too short for a safetensors header");
}

TEST_F(SafetensorsTest, RejectsHeaderRunningPastTheEnd) {
  std::string bytes;
  PutU64LE(&bytes, 1000);
  bytes += "{}";
  EXPECT_EQ(OpenError(bytes).message,
            dir_.file("bad.safetensors") + ": header of 1000 bytes runs past the end of the 10-byte file (truncated?)");
}

TEST_F(SafetensorsTest, RejectsHeaderOverTheCap) {
  std::string bytes;
  PutU64LE(&bytes, 0xffffffffffffull);
  auto file = SafetensorsFile::Open(Write("huge.safetensors", bytes + "{}"));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code, ErrorCode::kDataLoss);
  EXPECT_NE(file.error().message.find("exceeds the limit of 104857600"), std::string::npos) << file.error().message;
}

TEST_F(SafetensorsTest, RejectsTruncatedData) {
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.AddFloats("w", DType::kF32, {4}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(writer.Write(dir_.file("full.safetensors")).ok());
  std::string bytes = testing::ReadFile(dir_.file("full.safetensors"));
  bytes.resize(bytes.size() - 3);
  EXPECT_EQ(
      OpenError(bytes).message,
      dir_.file("bad.safetensors") + ": tensor \"w\" ends at byte 16 of a data area of 13 bytes (truncated file?)");
}

TEST(ParseSafetensorsHeader, RejectsMalformedJsonAndNonObjects) {
  EXPECT_EQ(ParseSafetensorsHeader("{\"w\": ", 0, "f").error().message, "f: header is not valid JSON");
  EXPECT_EQ(ParseSafetensorsHeader("[1, 2]", 0, "f").error().message, "f: header is not a JSON object");
}

TEST(ParseSafetensorsHeader, RejectsUnknownDtype) {
  EXPECT_EQ(ParseSafetensorsHeader(R"({"w": {"dtype": "F12", "shape": [1], "data_offsets": [0, 2]}})", 2, "f")
                .error()
                .message,
            "f: tensor \"w\" has unknown dtype \"F12\"");
}

TEST(ParseSafetensorsHeader, RejectsShapeThatDisagreesWithTheBytes) {
  EXPECT_EQ(ParseSafetensorsHeader(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20, "f")
                .error()
                .message,
            "f: tensor \"w\" has 20 bytes but its shape and dtype need 24");
}

TEST(ParseSafetensorsHeader, RejectsNegativeAndOverflowingShapes) {
  EXPECT_EQ(ParseSafetensorsHeader(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, "f")
                .error()
                .message,
            "f: tensor \"w\" has a shape entry that is not a non-negative integer");
  EXPECT_EQ(ParseSafetensorsHeader(
                R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4, "f")
                .error()
                .message,
            "f: tensor \"w\" has a shape too large to address");
}

TEST(ParseSafetensorsHeader, RejectsOverlapsHolesAndTrailingBytes) {
  EXPECT_EQ(ParseSafetensorsHeader(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                       "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
                                   6, "f")
                .error()
                .message,
            "f: tensor \"b\" overlaps the tensor before it");
  EXPECT_EQ(
      ParseSafetensorsHeader(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})", 4, "f").error().message,
      "f: bytes 0 to 2 before tensor \"a\" belong to no tensor");
  EXPECT_EQ(
      ParseSafetensorsHeader(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", 5, "f").error().message,
      "f: the last 3 bytes of the data area belong to no tensor");
  EXPECT_EQ(
      ParseSafetensorsHeader(R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [3, 2]}})", 5, "f").error().message,
      "f: tensor \"a\" has data_offsets ending before they begin");
}

TEST(ParseSafetensorsHeader, RejectsDuplicateNames) {
  EXPECT_EQ(ParseSafetensorsHeader(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                                       "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                                   2, "f")
                .error()
                .message,
            "f: tensor \"a\" is listed twice");
}

TEST(ParseSafetensorsHeader, RejectsNonStringMetadataAndTooManyDimensions) {
  EXPECT_EQ(ParseSafetensorsHeader(R"({"__metadata__": {"format": 1}})", 0, "f").error().message,
            "f: __metadata__ value of \"format\" is not a string");
  EXPECT_EQ(
      ParseSafetensorsHeader(R"({"w": {"dtype": "U8", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 1]}})", 1, "f")
          .error()
          .message,
      "f: tensor \"w\" has 9 dimensions; at most 8 are accepted");
}

TEST(ParseSafetensorsHeader, AcceptsScalarsAndEmptyTensors) {
  auto header = ParseSafetensorsHeader(R"({"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
                                           "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]}})",
                                       4, "f");
  ASSERT_TRUE(header.ok()) << header.error().ToString();
  EXPECT_EQ(header->tensors.size(), 2u);
}

class ShardedCheckpointTest : public SafetensorsTest {
 protected:
  void WriteShards() {
    SafetensorsWriter one, two;
    ASSERT_TRUE(one.AddFloats("model.embed_tokens.weight", DType::kF32, {2}, {1, 2}).ok());
    ASSERT_TRUE(two.AddFloats("lm_head.weight", DType::kBF16, {2}, {3, 4}).ok());
    ASSERT_TRUE(one.Write(dir_.file("model-00001-of-00002.safetensors")).ok());
    ASSERT_TRUE(two.Write(dir_.file("model-00002-of-00002.safetensors")).ok());
  }
  void WriteIndex(const std::string& weight_map) {
    testing::WriteFile(dir_.file("model.safetensors.index.json"),
                       R"({"metadata": {"total_size": 12}, "weight_map": )" + weight_map + "}");
  }
};

TEST_F(ShardedCheckpointTest, FindsTensorsAcrossShards) {
  WriteShards();
  WriteIndex(R"({"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                 "lm_head.weight": "model-00002-of-00002.safetensors"})");
  auto checkpoint = SafetensorsCheckpoint::Open(dir_.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error().ToString();
  EXPECT_EQ((*checkpoint)->shard_count(), 2u);
  EXPECT_EQ((*checkpoint)->TensorNames(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight"}));
  auto head = (*checkpoint)->Get("lm_head.weight");
  ASSERT_TRUE(head.ok());
  std::vector<float> values;
  ASSERT_TRUE(DecodeToFloat(*head, &values).ok());
  EXPECT_EQ(values, (std::vector<float>{3, 4}));
  auto absent = (*checkpoint)->Get("model.norm.weight");
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.error().message, "checkpoint " + dir_.path() + " has no tensor \"model.norm.weight\"");
}

TEST_F(ShardedCheckpointTest, RejectsIndexNamingATensorItsShardLacks) {
  WriteShards();
  WriteIndex(R"({"model.norm.weight": "model-00001-of-00002.safetensors"})");
  auto checkpoint = SafetensorsCheckpoint::Open(dir_.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.error().message, dir_.file("model.safetensors.index.json") +
                                            " maps tensor \"model.norm.weight\" to model-00001-of-00002.safetensors, "
                                            "which does not contain it");
}

TEST_F(ShardedCheckpointTest, RejectsShardNamesWithPaths) {
  WriteIndex(R"({"w": "../../etc/passwd"})");
  auto checkpoint = SafetensorsCheckpoint::Open(dir_.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.error().message,
            dir_.file("model.safetensors.index.json") + ": shard name \"../../etc/passwd\" must be a plain file name");
}

TEST_F(ShardedCheckpointTest, MissingShardIsNotFound) {
  WriteIndex(R"({"w": "model-00009-of-00009.safetensors"})");
  auto checkpoint = SafetensorsCheckpoint::Open(dir_.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.error().code, ErrorCode::kNotFound);
}

TEST_F(ShardedCheckpointTest, EmptyDirectoryIsNotFound) {
  auto checkpoint = SafetensorsCheckpoint::Open(dir_.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.error().message,
            dir_.path() + " has neither model.safetensors nor model.safetensors.index.json");
}

TEST_F(SafetensorsTest, CorruptedFilesGiveErrorsNeverCrashes) {
  // Seeded corruption of a valid file: flipped header bytes, forged lengths, truncation.
  // Every outcome must be a clean error, or a file whose tensors all decode within bounds.
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.AddFloats("a", DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6}).ok());
  ASSERT_TRUE(writer.AddFloats("b", DType::kBF16, {4}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(writer.Write(dir_.file("good.safetensors")).ok());
  const std::string good = testing::ReadFile(dir_.file("good.safetensors"));
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  int opened = 0, refused = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string bytes = good;
    switch (round % 3) {
      case 0:  // flip bytes anywhere in the length prefix or header
        for (int k = 0; k < 1 + static_cast<int>(next() % 4); ++k) {
          bytes[next() % (bytes.size() - 24)] = static_cast<char>(next() & 0xff);
        }
        break;
      case 1:  // truncate
        bytes.resize(next() % bytes.size());
        break;
      case 2:  // replace a digit of the header with another digit: plausible but wrong numbers
        for (size_t i = 8 + next() % (bytes.size() - 32); i < bytes.size() - 24; ++i) {
          if (bytes[i] >= '0' && bytes[i] <= '9') {
            bytes[i] = static_cast<char>('0' + next() % 10);
            break;
          }
        }
        break;
    }
    auto file = SafetensorsFile::Open(Write("fuzz.safetensors", bytes));
    if (!file.ok()) {
      ++refused;
      continue;
    }
    ++opened;
    for (const TensorInfo& t : (*file)->tensors()) {
      std::vector<float> values;
      (void)DecodeToFloat((*file)->View(t), &values);
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_EQ(opened + refused, 2000);
}

TEST(HalfPrecision, DecodesKnownBitPatterns) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x7c00), INFINITY);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0xc040), -3.0f);
}

TEST(HalfPrecision, EncodingRoundsToNearestEvenAndRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f = HalfToFloat(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << bits;
    ASSERT_EQ(BFloat16ToFloat(FloatToBFloat16(BFloat16ToFloat(h))), BFloat16ToFloat(h));
  }
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // a tie: rounds to even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);     // a tie: rounds to even
  EXPECT_EQ(FloatToHalf(70000.0f), 0x7c00);
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

// A header of `count` one-float tensors laid end to end.
std::string ManyTensorHeader(size_t count) {
  std::string header = "{";
  for (size_t i = 0; i < count; ++i) {
    header += (i ? "," : "") + std::string("\"t") + std::to_string(i) +
              "\":{\"dtype\":\"F32\",\"shape\":[1],"
              "\"data_offsets\":[" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
  }
  return header + "}";
}

TEST(ParseSafetensorsHeader, ManySmallTensorsParseUpToTheTensorLimit) {
  // 200,000 tensors (a 13 MB header, under the 100 MiB cap) did not finish in quadratic time.
  const size_t count = 200000;
  auto parsed = ParseSafetensorsHeader(ManyTensorHeader(count), 4 * count, "many");
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  EXPECT_EQ(parsed->tensors.size(), count);
  SafetensorsLimits limits;
  limits.max_tensors = 1000;
  auto refused = ParseSafetensorsHeader(ManyTensorHeader(1001), 4 * 1001, "many", limits);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "many: the header lists 1001 tensors; at most 1000 are accepted");
}

}  // namespace
}  // namespace txscore::llm
