// Explicit byte-order encoding for everything txscore persists.
//
// txscore runs on big-endian machines (IBM Z) as well as little-endian ones, so stored bytes
// never depend on the host: each helper writes or reads a stated byte order one byte at a
// time, with no type-punning of unaligned buffers.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace txscore {

inline void PutU32LE(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutU64LE(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutU64BE(std::string* out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutF64LE(std::string* out, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  PutU64LE(out, bits);
}
inline void PutBytes(std::string* out, std::string_view bytes) {
  PutU32LE(out, static_cast<uint32_t>(bytes.size()));
  out->append(bytes);
}

inline uint64_t GetU64BE(std::string_view in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

// Reads little-endian values from a buffer; any read past the end sets failed() and
// returns zero, so a decoder checks once at the end instead of after every field.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}

  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint32_t U32LE() {
    if (!Need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return v;
  }
  uint64_t U64LE() {
    if (!Need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  double F64LE() {
    uint64_t bits = U64LE();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  std::string Bytes() {
    uint32_t n = U32LE();
    if (!Need(n)) return {};
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }

  bool failed() const { return failed_; }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  bool Need(size_t n) {
    if (failed_ || in_.size() - pos_ < n) {
      failed_ = true;
      return false;
    }
    return true;
  }

  std::string_view in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// FNV-1a, 64 bit: a stable hash for ids kept in state (same value on every platform).
inline uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace txscore
