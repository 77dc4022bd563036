#include "llm/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/bytes.h"
#include "common/file_io.h"
#include "llm/cpu_kernels/kernels.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF64, "F64", 8}, {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},   {DType::kI16, "I16", 2}, {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},   {DType::kBool, "BOOL", 1},
};

std::string ReadWholeFile(const std::string& path, bool* ok) {
  Result<std::string> read = ReadFileBounded(path, size_t{64} << 20, "index file");  // an index is JSON: small
  *ok = read.ok();
  return read.ok() ? std::move(read).value() : std::string();
}

}  // namespace

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name) return d.dtype;
  }
  return std::nullopt;
}

const char* DTypeName(DType dtype) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

namespace {

// SAX handler: the keys of the top-level object and the first one seen twice.
struct TopLevelKeys : nlohmann::json_sax<json> {
  int depth = 0;
  std::set<std::string> names;
  std::string duplicate;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool key(string_t& name) override {
    if (depth == 1 && !names.insert(name).second && duplicate.empty()) duplicate = name;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

}  // namespace

size_t DTypeSize(DType dtype) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view header, uint64_t data_size, const std::string& source,
                                                 const SafetensorsLimits& limits) {
  auto fail = [&](const std::string& what) { return DataLoss(source + ": " + what); };
  // Duplicate tensor names would silently shadow each other in a JSON object: a first pass
  // over the text finds them, and counts the tensors before any is stored. (nlohmann's
  // callback parser would do it in one pass, but scans the parent object at the end of every
  // child: quadratic in the number of tensors.)
  TopLevelKeys keys;
  if (!json::sax_parse(header.begin(), header.end(), &keys)) return fail("header is not valid JSON");
  if (!keys.duplicate.empty()) return fail("tensor \"" + keys.duplicate + "\" is listed twice");
  const size_t tensor_count = keys.names.size() - keys.names.count("__metadata__");
  if (tensor_count > limits.max_tensors) {
    return fail("the header lists " + std::to_string(tensor_count) + " tensors; at most " +
                std::to_string(limits.max_tensors) + " are accepted");
  }
  const json doc = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return fail("header is not valid JSON");
  if (!doc.is_object()) return fail("header is not a JSON object");

  SafetensorsHeader out;
  for (const auto& [name, entry] : doc.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return fail("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return fail("__metadata__ value of \"" + key + "\" is not a string");
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + name + "\"";
    if (!entry.is_object()) return fail(where + " is not an object");
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) return fail(where + " has no string \"dtype\"");
    if (shape_it == entry.end() || !shape_it->is_array()) return fail(where + " has no \"shape\" array");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
      return fail(where + " needs \"data_offsets\": [begin, end] of non-negative integers");
    }
    TensorInfo info;
    info.name = name;
    std::optional<DType> dtype = DTypeFromName(dtype_it->get<std::string>());
    if (!dtype) return fail(where + " has unknown dtype \"" + dtype_it->get<std::string>() + "\"");
    info.dtype = *dtype;
    if (shape_it->size() > limits.max_rank) {
      return fail(where + " has " + std::to_string(shape_it->size()) + " dimensions; at most " +
                  std::to_string(limits.max_rank) + " are accepted");
    }
    uint64_t bytes = DTypeSize(info.dtype);
    for (const json& dim : *shape_it) {
      if (!dim.is_number_unsigned()) return fail(where + " has a shape entry that is not a non-negative integer");
      const uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, d, &bytes)) {
        return fail(where + " has a shape too large to address");
      }
      info.shape.push_back(static_cast<int64_t>(d));
    }
    const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
    const uint64_t end = (*offsets_it)[1].get<uint64_t>();
    if (end < begin) return fail(where + " has data_offsets ending before they begin");
    if (end > data_size) {
      return fail(where + " ends at byte " + std::to_string(end) + " of a data area of " + std::to_string(data_size) +
                  " bytes (truncated file?)");
    }
    if (end - begin != bytes) {
      return fail(where + " has " + std::to_string(end - begin) + " bytes but its shape and dtype need " +
                  std::to_string(bytes));
    }
    info.offset = begin;
    info.size_bytes = bytes;
    out.tensors.push_back(std::move(info));
  }
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset < b.offset || (a.offset == b.offset && a.size_bytes < b.size_bytes);
  });
  // The data area must be covered exactly: no overlaps, no holes.
  uint64_t expected = 0;
  for (const TensorInfo& t : out.tensors) {
    if (t.offset < expected) return fail("tensor \"" + t.name + "\" overlaps the tensor before it");
    if (t.offset > expected)
      return fail("bytes " + std::to_string(expected) + " to " + std::to_string(t.offset) + " before tensor \"" +
                  t.name + "\" belong to no tensor");
    expected = t.offset + t.size_bytes;
  }
  if (expected != data_size) {
    return fail("the last " + std::to_string(data_size - expected) + " bytes of the data area belong to no tensor");
  }
  return out;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path,
                                                               const SafetensorsLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + " is not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return DataLoss(path + ": " + std::to_string(file_size) + " bytes is too short for a safetensors header");
  }
  void* mapping = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Internal("cannot map " + path + ": " + why);
  }

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->fd_ = fd;
  file->opened_ = st;
  file->mapping_ = mapping;
  file->mapping_size_ = file_size;
  const auto* bytes = static_cast<const uint8_t*>(mapping);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];  // little-endian, on any host
  if (header_size > limits.max_header_bytes) {
    return DataLoss(path + ": header of " + std::to_string(header_size) + " bytes exceeds the limit of " +
                    std::to_string(limits.max_header_bytes));
  }
  if (header_size > file_size - 8) {
    return DataLoss(path + ": header of " + std::to_string(header_size) + " bytes runs past the end of the " +
                    std::to_string(file_size) + "-byte file (truncated?)");
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_size);
  Result<SafetensorsHeader> parsed = ParseSafetensorsHeader(header, file_size - 8 - header_size, path, limits);
  if (!parsed.ok()) return parsed.error();
  file->header_ = std::move(parsed).value();
  file->data_ = bytes + 8 + header_size;
  for (const TensorInfo& t : file->header_.tensors) file->by_name_[t.name] = &t;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
  if (fd_ >= 0) ::close(fd_);
}

Status SafetensorsFile::CheckUnchanged() const {
  struct stat now {};
  if (::fstat(fd_, &now) == 0) {
    // A file renamed over this one unlinks it: that moves its change time, not its bytes.
    if (now.st_nlink < opened_.st_nlink) now.st_ctim = opened_.st_ctim;
    if (SameFileVersion(opened_, now)) return Status::Ok();
  }
  return Unavailable(path_ +
                     " changed while it was read (rewritten in place?); nothing read from it is used. Update a "
                     "checkpoint by writing its files anew and renaming them (or the directory) into place");
}

Status SafetensorsCheckpoint::CheckUnchanged() const {
  for (const auto& shard : shards_) TXSCORE_RETURN_IF_ERROR(shard->CheckUnchanged());
  return Status::Ok();
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(const std::string& dir,
                                                                           const SafetensorsLimits& limits) {
  namespace fs = std::filesystem;
  auto checkpoint = std::make_unique<SafetensorsCheckpoint>();
  checkpoint->dir_ = dir;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  if (!fs::exists(index_path)) {
    if (!fs::exists(single_path)) {
      return NotFound(dir + " has neither model.safetensors nor model.safetensors.index.json");
    }
    Result<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(single_path.string(), limits);
    if (!file.ok()) return file.error();
    for (const TensorInfo& t : (*file)->tensors()) checkpoint->tensors_[t.name] = {file->get(), &t};
    checkpoint->shards_.push_back(std::move(file).value());
    return checkpoint;
  }

  bool read_ok = false;
  const std::string text = ReadWholeFile(index_path.string(), &read_ok);
  const json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!read_ok || index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    return DataLoss(index_path.string() + ": expected a JSON object with a \"weight_map\" object");
  }
  std::map<std::string, const SafetensorsFile*> shard_by_name;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) return DataLoss(index_path.string() + ": shard of \"" + tensor + "\" is not a string");
    const std::string shard_name = shard.get<std::string>();
    // Shards live beside the index: a name with a path in it could point anywhere.
    if (shard_name.empty() || shard_name.find('/') != std::string::npos || shard_name == "." || shard_name == "..") {
      return DataLoss(index_path.string() + ": shard name \"" + shard_name + "\" must be a plain file name");
    }
    auto it = shard_by_name.find(shard_name);
    if (it == shard_by_name.end()) {
      Result<std::unique_ptr<SafetensorsFile>> file =
          SafetensorsFile::Open((fs::path(dir) / shard_name).string(), limits);
      if (!file.ok()) return file.error();
      it = shard_by_name.emplace(shard_name, file->get()).first;
      checkpoint->shards_.push_back(std::move(file).value());
    }
    const TensorInfo* info = it->second->Find(tensor);
    if (info == nullptr) {
      return DataLoss(index_path.string() + " maps tensor \"" + tensor + "\" to " + shard_name +
                      ", which does not contain it");
    }
    checkpoint->tensors_[tensor] = {it->second, info};
  }
  return checkpoint;
}

Result<TensorView> SafetensorsCheckpoint::Get(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return NotFound("checkpoint " + dir_ + " has no tensor \"" + std::string(name) + "\"");
  return it->second.first->View(*it->second.second);
}

bool SafetensorsCheckpoint::Contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

std::vector<std::string> SafetensorsCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, where] : tensors_) names.push_back(name);
  return names;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  float value;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal (or zero)
  } else if (exponent == 31) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else {
    value = std::ldexp(static_cast<float>(mantissa | 0x400), static_cast<int>(exponent) - 25);
  }
  return sign ? -value : value;
}

// One definition of bfloat16's bits, shared with the CPU kernels (llm/cpu_kernels/kernels.h).
float BFloat16ToFloat(uint16_t bits) { return cpu::Bf16ToFloat(bits); }

uint16_t FloatToBFloat16(float value) { return cpu::FloatToBf16(value); }

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const float magnitude = std::fabs(value);
  if (std::isnan(value)) return sign | 0x7e00;
  if (magnitude >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (magnitude < std::ldexp(1.0f, -14)) {
    // Subnormal: units of 2^-24, nearest even.
    const float units = magnitude * std::ldexp(1.0f, 24);
    return sign | static_cast<uint16_t>(std::nearbyint(units));
  }
  int exponent;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent, fraction in [0.5, 1)
  // 11 significant bits: mantissa in [1024, 2048).
  uint32_t mantissa = static_cast<uint32_t>(std::nearbyint(std::ldexp(fraction, 11)));
  int biased = exponent - 1 + 15;
  if (mantissa == 2048) {  // rounding carried into the next power of two
    mantissa = 1024;
    ++biased;
  }
  if (biased >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((biased << 10) | (mantissa & 0x3ff));
}

Status DecodeToFloat(const TensorView& view, std::vector<float>* out) {
  const int64_t n = view.info->numel();
  out->resize(static_cast<size_t>(n));
  const uint8_t* p = view.data;
  switch (view.info->dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i, p += 4) {
        const uint32_t bits = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
        std::memcpy(&(*out)[static_cast<size_t>(i)], &bits, 4);
      }
      return Status::Ok();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i, p += 2)
        (*out)[static_cast<size_t>(i)] = HalfToFloat(static_cast<uint16_t>(p[0] | p[1] << 8));
      return Status::Ok();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i, p += 2)
        (*out)[static_cast<size_t>(i)] = BFloat16ToFloat(static_cast<uint16_t>(p[0] | p[1] << 8));
      return Status::Ok();
    default:
      return InvalidArgument(std::string("tensor \"") + view.info->name + "\" is " + DTypeName(view.info->dtype) +
                             "; only F32, F16 and BF16 decode to float");
  }
}

Status SafetensorsWriter::Add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::string bytes) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument("tensor \"" + name + "\" has a negative dimension");
    numel *= d;
  }
  if (static_cast<uint64_t>(numel) * DTypeSize(dtype) != bytes.size()) {
    return InvalidArgument("tensor \"" + name + "\": " + std::to_string(bytes.size()) + " bytes for " +
                           std::to_string(numel) + " elements of " + DTypeName(dtype));
  }
  for (const Entry& e : entries_) {
    if (e.name == name) return InvalidArgument("tensor \"" + name + "\" added twice");
  }
  entries_.push_back({name, dtype, std::move(shape), std::move(bytes)});
  return Status::Ok();
}

Status SafetensorsWriter::AddFloats(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                    const std::vector<float>& values) {
  std::string bytes;
  for (float v : values) {
    if (dtype == DType::kF32) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      PutU32LE(&bytes, bits);
    } else if (dtype == DType::kBF16 || dtype == DType::kF16) {
      const uint16_t bits = dtype == DType::kBF16 ? FloatToBFloat16(v) : FloatToHalf(v);
      bytes.push_back(static_cast<char>(bits & 0xff));
      bytes.push_back(static_cast<char>(bits >> 8));
    } else {
      return InvalidArgument("AddFloats writes F32, F16 or BF16 only");
    }
  }
  return Add(name, dtype, std::move(shape), std::move(bytes));
}

Status SafetensorsWriter::Write(const std::string& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {
        {"dtype", DTypeName(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data area 8-byte aligned
  std::string prefix;
  PutU64LE(&prefix, text.size());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << prefix << text;
    for (const Entry& e : entries_) out << e.bytes;
    out.close();
    if (!out) return Internal("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Internal("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace txscore::llm
