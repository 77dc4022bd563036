// Reading (and writing) Hugging Face safetensors checkpoints.
//
// A .safetensors file is: an 8-byte little-endian header length N, N bytes of JSON mapping
// each tensor name to {dtype, shape, data_offsets: [begin, end]} (plus an optional
// "__metadata__" object of strings), then the tensor bytes, little-endian, offsets relative
// to the end of the header. Files are memory-mapped, never copied.
//
// Every header is validated before any tensor byte is touched: length within the cap and the
// file, JSON well-formed with no duplicate names, known dtypes, non-negative shapes whose
// byte size matches the offsets, offsets inside the data area, sorted, neither overlapping
// nor leaving holes. A truncated or hostile file gets an Error naming the file and the
// problem; nothing is read out of bounds.
//
// No libtorch here: tensors are views of bytes. Turning them into torch tensors is the
// model loader's job.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace txscore::llm {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };
std::optional<DType> DTypeFromName(std::string_view name);  // "F32", "BF16", ...
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;      // from the start of the data area
  uint64_t size_bytes = 0;  // = numel * DTypeSize(dtype)
  int64_t numel() const;
};

// A tensor's bytes inside a mapped file; valid while the file (or checkpoint) is open.
struct TensorView {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;  // little-endian elements
};

struct SafetensorsLimits {
  uint64_t max_header_bytes = 100ull << 20;  // Default: 100 MiB, the reference implementation's cap
  size_t max_rank = 8;                       // Default: 8 dimensions
  size_t max_tensors = 1000000;              // Default: 1M tensors per file (real checkpoints: thousands)
};

// Parses and validates a header. `header` is the JSON text, `data_size` the number of bytes
// after it. Separate from file I/O so it can be tested and fuzzed on its own.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;
};
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view header, uint64_t data_size, const std::string& source,
                                                 const SafetensorsLimits& limits = {});

// One memory-mapped .safetensors file. Thread-safe for reading.
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path, const SafetensorsLimits& limits = {});
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr when absent.
  const TensorInfo* Find(std::string_view name) const;
  TensorView View(const TensorInfo& info) const { return {&info, data_ + info.offset}; }
  const std::string& path() const { return path_; }
  // kUnavailable when the file was changed in place since it was opened (its size, modification
  // or change time differ): what was read from the mapping may mix old and new bytes. A file
  // replaced by a rename is not this file, and reads stay whole.
  Status CheckUnchanged() const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  int fd_ = -1;            // kept open to fstat the mapped file itself, whatever its name is now
  struct stat opened_ {};  // its fstat when it was opened
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data area
  SafetensorsHeader header_;
  std::map<std::string_view, const TensorInfo*> by_name_;
};

// All tensors of a checkpoint directory: model.safetensors, or the shards listed by
// model.safetensors.index.json ({"weight_map": {tensor: shard file}}).
class SafetensorsCheckpoint {
 public:
  static Result<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& dir,
                                                             const SafetensorsLimits& limits = {});
  // kNotFound naming the tensor when it is absent.
  Result<TensorView> Get(std::string_view name) const;
  bool Contains(std::string_view name) const;
  std::vector<std::string> TensorNames() const;  // sorted
  size_t shard_count() const { return shards_.size(); }
  // SafetensorsFile::CheckUnchanged for every file: call it once everything needed is copied
  // out of the mappings.
  Status CheckUnchanged() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, std::pair<const SafetensorsFile*, const TensorInfo*>, std::less<>> tensors_;
  std::string dir_;
};

// Element decoding independent of the host's byte order.
float HalfToFloat(uint16_t bits);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);  // round to nearest even
uint16_t FloatToHalf(float value);      // round to nearest even
// Decodes an F32, F16 or BF16 tensor into host floats; kInvalidArgument for other dtypes.
Status DecodeToFloat(const TensorView& view, std::vector<float>* out);

// Builds a .safetensors file; used by make-checkpoint and tests.
class SafetensorsWriter {
 public:
  // `bytes` are the little-endian elements; their size must match shape and dtype.
  Status Add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::string bytes);
  Status AddFloats(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<float>& values);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Writes to a temporary name and renames, so a reader never sees half a file.
  Status Write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace txscore::llm
