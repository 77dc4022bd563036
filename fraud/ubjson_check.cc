#include "fraud/ubjson_check.h"

#include <cstdint>
#include <string>

namespace txscore::fraud {
namespace {

class UbjsonWalker {
 public:
  UbjsonWalker(std::string_view in, const UbjsonCheckOptions& options) : in_(in), options_(options) {}

  Status Document() {
    char marker = 0;
    TXSCORE_RETURN_IF_ERROR(NextMarker(&marker));
    TXSCORE_RETURN_IF_ERROR(Value(marker, 0));
    while (pos_ < in_.size() && in_[pos_] == 'N') ++pos_;  // trailing no-ops are allowed
    if (pos_ != in_.size()) return Fail("unexpected bytes after the document");
    return Status::Ok();
  }

 private:
  Error Fail(const std::string& what) const {
    return DataLoss("malformed UBJSON: " + what + " at byte " + std::to_string(pos_));
  }

  // Size of the payload that follows a fixed-size marker, or -1 for markers without one.
  static int FixedPayloadSize(char marker) {
    switch (marker) {
      case 'Z':
      case 'N':
      case 'T':
      case 'F':
        return 0;
      case 'i':
      case 'U':
      case 'C':
        return 1;
      case 'I':
        return 2;
      case 'l':
      case 'd':
        return 4;
      case 'L':
      case 'D':
        return 8;
      default:
        return -1;
    }
  }

  Status NextMarker(char* marker) {
    if (pos_ >= in_.size()) return Fail("the input ends where a value should start");
    *marker = in_[pos_++];
    return Status::Ok();
  }

  Status Skip(uint64_t count, const char* what) {
    if (count > in_.size() - pos_) return Fail(std::string("the input ends inside ") + what);
    pos_ += count;
    return Status::Ok();
  }

  // Reads a big-endian integer of the given marker's width; negative lengths are refused.
  Status Length(uint64_t* length) {
    char marker = 0;
    TXSCORE_RETURN_IF_ERROR(NextMarker(&marker));
    int width = 0;
    bool is_signed = true;
    switch (marker) {
      case 'i':
        width = 1;
        break;
      case 'U':
        width = 1;
        is_signed = false;
        break;
      case 'I':
        width = 2;
        break;
      case 'l':
        width = 4;
        break;
      case 'L':
        width = 8;
        break;
      default:
        --pos_;
        return Fail(std::string("a length has the non-integer marker '") + marker + "'");
    }
    if (static_cast<size_t>(width) > in_.size() - pos_) return Fail("the input ends inside a length");
    uint64_t value = 0;
    for (int i = 0; i < width; ++i) value = (value << 8) | static_cast<uint8_t>(in_[pos_ + i]);
    const bool negative = is_signed && (static_cast<uint8_t>(in_[pos_]) & 0x80) != 0;
    if (negative) return Fail("a length is negative");
    pos_ += width;
    *length = value;
    return Status::Ok();
  }

  Status Value(char marker, int depth) {
    const int fixed = FixedPayloadSize(marker);
    if (fixed >= 0) return Skip(fixed, "a number");
    switch (marker) {
      case 'S':
      case 'H': {
        uint64_t length = 0;
        TXSCORE_RETURN_IF_ERROR(Length(&length));
        return Skip(length, "a string");
      }
      case '[':
        return Container(/*is_object=*/false, depth + 1);
      case '{':
        return Container(/*is_object=*/true, depth + 1);
      default:
        --pos_;
        return Fail(std::string("unknown marker '") + marker + "'");
    }
  }

  Status Key() {
    uint64_t length = 0;
    TXSCORE_RETURN_IF_ERROR(Length(&length));
    return Skip(length, "an object key");
  }

  Status Container(bool is_object, int depth) {
    if (depth > options_.max_depth) return Fail("containers nest deeper than " + std::to_string(options_.max_depth));
    char element_type = 0;  // 0: each element carries its own marker
    bool counted = false;
    uint64_t count = 0;
    if (pos_ < in_.size() && in_[pos_] == '$') {
      ++pos_;
      TXSCORE_RETURN_IF_ERROR(NextMarker(&element_type));
      if (pos_ >= in_.size() || in_[pos_] != '#') return Fail("a typed container has no count");
    }
    if (pos_ < in_.size() && in_[pos_] == '#') {
      ++pos_;
      counted = true;
      TXSCORE_RETURN_IF_ERROR(Length(&count));
    }
    if (counted && element_type != 0) {
      const int fixed = FixedPayloadSize(element_type);
      if (fixed == 0 && !is_object) return Status::Ok();  // e.g. an array of nulls: no payload at all
      if (fixed > 0 && !is_object) {
        if (count > (in_.size() - pos_) / static_cast<uint64_t>(fixed))
          return Fail("the input ends inside a typed array");
        pos_ += count * fixed;
        return Status::Ok();
      }
    }
    if (counted) {
      // Every element takes at least one byte (a key's length marker, or a value's marker), so a
      // count larger than what is left is refused before looping.
      if (count > in_.size() - pos_) return Fail("a container counts more elements than the input holds");
      for (uint64_t i = 0; i < count; ++i) {
        if (is_object) TXSCORE_RETURN_IF_ERROR(Key());
        char marker = element_type;
        if (marker == 0) TXSCORE_RETURN_IF_ERROR(NextMarker(&marker));
        TXSCORE_RETURN_IF_ERROR(Value(marker, depth));
      }
      return Status::Ok();
    }
    const char close = is_object ? '}' : ']';
    while (true) {
      if (pos_ >= in_.size()) return Fail(is_object ? "an object is not closed" : "an array is not closed");
      if (in_[pos_] == close) {
        ++pos_;
        return Status::Ok();
      }
      if (in_[pos_] == 'N') {
        ++pos_;
        continue;
      }
      if (is_object) TXSCORE_RETURN_IF_ERROR(Key());
      char marker = 0;
      TXSCORE_RETURN_IF_ERROR(NextMarker(&marker));
      TXSCORE_RETURN_IF_ERROR(Value(marker, depth));
    }
  }

  std::string_view in_;
  const UbjsonCheckOptions& options_;
  size_t pos_ = 0;
};

}  // namespace

Status CheckUbjsonDocument(std::string_view bytes, const UbjsonCheckOptions& options) {
  return UbjsonWalker(bytes, options).Document();
}

}  // namespace txscore::fraud
