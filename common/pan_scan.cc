#include "common/pan_scan.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "common/logged_id.h"

namespace txscore {
namespace {

// One character of the text as the scanners see it: a digit ('0'-'9'), a hex letter a-f or
// A-F ('h'), another letter ('a', and the letters of the scripts Classify lists: "4111年1111..."
// is no card), or a separator (an ASCII character that is neither a letter nor a digit, itself;
// a Unicode space, dash or full-width punctuation mark, as its ASCII look-alike: ' ' for any
// space, tab or line break; any other character, '#'); with the bytes it came from.
// Invisible characters become no unit at all.
struct Unit {
  char c;
  size_t begin, end;  // byte offsets in the text
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
// Between a card number's digits, in free text as in ids: anything that is neither a letter nor
// a digit ("4000 0012 ...", "4000-0012-...", "4000*0012*...", "(4000) (0012) ..."), up to three
// in a row ("4000 - 0012": a dash between spaces).
bool IsSeparator(char c) { return c != 'h' && c != 'a' && !IsDigit(c); }
constexpr size_t kMaxSeparators = 3;

// The code point at text[*at] (advancing *at); a byte that starts no valid UTF-8 sequence is
// returned alone as U+FFFD.
char32_t NextCodePoint(std::string_view text, size_t* at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(*at);
  size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || *at + length > text.size()) {
    ++*at;
    return lead < 0x80 ? lead : 0xFFFD;
  }
  char32_t cp = length == 1 ? lead : lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((byte(*at + i) & 0xC0) != 0x80) {
      ++*at;
      return 0xFFFD;
    }
    cp = (cp << 6) | (byte(*at + i) & 0x3F);
  }
  *at += length;
  return cp;
}

// The zero of each block of ten decimal digits Unicode has (category Nd) in the BMP and the
// mathematical digits; a digit of any of them counts as the ASCII digit it stands for.
constexpr char32_t kDigitZeros[] = {
    0x0660, 0x06F0, 0x07C0, 0x0966, 0x09E6, 0x0A66, 0x0AE6, 0x0B66, 0x0BE6,  0x0C66,  0x0CE6,  0x0D66,  0x0DE6,  0x0E50,
    0x0ED0, 0x0F20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80,  0x1A90,  0x1B50,  0x1BB0,  0x1C40,  0x1C50,
    0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6,
};

// How the scanners see a code point; 0 for one they skip (invisible format characters).
char Classify(char32_t cp) {
  if (cp < 0x80) {
    const char c = static_cast<char>(cp);
    if (IsDigit(c)) return c;
    if ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')) return 'h';
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 'a';
    if (c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return ' ';
    return c == '\0' ? ' ' : c;  // any other ASCII character: a separator, itself
  }
  for (char32_t zero : kDigitZeros) {
    if (cp >= zero && cp < zero + 10) return static_cast<char>('0' + (cp - zero));
  }
  if (cp == 0x00AD || cp == 0x034F || cp == 0x180E || (cp >= 0x200B && cp <= 0x200F) || cp == 0x061C ||
      (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x2064) || cp == 0xFEFF ||
      (cp >= 0xFE00 && cp <= 0xFE0F)) {
    return 0;  // soft hyphen, joiners, zero-width and direction marks (Arabic's too), byte-order mark, variation
               // selectors
  }
  if (cp == 0x00A0 || cp == 0x0085 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
      cp == 0x202F || cp == 0x205F || cp == 0x3000) {
    return ' ';
  }
  if ((cp >= 0x2010 && cp <= 0x2015) || cp == 0x2212 || cp == 0xFE58 || cp == 0xFE63 || cp == 0xFF0D) return '-';
  switch (cp) {
    case 0xFF0C:
    case 0x3001:
      return ',';
    case 0xFF0E:
    case 0x3002:
      return '.';
    case 0xFF0F:
      return '/';
    case 0xFF1A:
      return ':';
    case 0xFF3F:
      return '_';
    case 0xFF0B:
      return '+';
    case 0xFF5C:
      return '|';
    case 0xFF1B:
      return ';';
    default:
      break;
  }
  // Letters of other scripts end a run ("4111年1111..." is no card); any other character (a
  // bullet, a middle dot, a symbol, U+FFFD for a byte that is not UTF-8, and the punctuation
  // and signs inside those scripts' blocks) separates, as ASCII punctuation does.
  struct Range {
    char32_t first, last;
  };
  static constexpr Range kPunctuationInLetterBlocks[] = {
      {0x0374, 0x0375}, {0x037E, 0x037E}, {0x0384, 0x0385}, {0x0387, 0x0387},  // Greek numeral signs, ';', '·'
      {0x0482, 0x0482},                                                        // Cyrillic thousands sign
      {0x055A, 0x055F}, {0x0589, 0x058A}, {0x058D, 0x058F},                    // Armenian
      {0x05BE, 0x05BE}, {0x05C0, 0x05C0}, {0x05C3, 0x05C3}, {0x05C6, 0x05C6},  // Hebrew maqaf, paseq, sof pasuq
      {0x05F3, 0x05F4},                                                        // Hebrew geresh, gershayim
      {0x0600, 0x060F}, {0x061B, 0x061B}, {0x061D, 0x061F}, {0x066A, 0x066D},  // Arabic signs, ',', ';', '?', '٫'
      {0x06D4, 0x06D4}, {0x06DD, 0x06DE}, {0x06E9, 0x06E9}, {0x06FD, 0x06FE},  // Arabic full stop, signs
      {0x0964, 0x0965}, {0x0970, 0x0970}, {0x09F2, 0x09FB}, {0x0AF0, 0x0AF1},  // dandas, Indic signs
      {0x0BF3, 0x0BFA}, {0x0DF4, 0x0DF4},                                      // Tamil signs, Sinhala full stop
      {0x0E3F, 0x0E3F}, {0x0E4F, 0x0E4F}, {0x0E5A, 0x0E5B},                    // Thai baht and marks
      {0x10FB, 0x10FB}, {0x1360, 0x1368},                                      // Georgian, Ethiopic punctuation
  };
  for (const Range& r : kPunctuationInLetterBlocks) {
    if (cp >= r.first && cp <= r.last) return '#';
  }
  const bool letter = (cp >= 0x00C0 && cp <= 0x024F && cp != 0x00D7 && cp != 0x00F7) ||    // Latin
                      (cp >= 0x0370 && cp <= 0x058F) ||                                    // Greek, Cyrillic, Armenian
                      (cp >= 0x0590 && cp <= 0x06FF) ||                                    // Hebrew, Arabic
                      (cp >= 0x0900 && cp <= 0x0EFF) ||                                    // Indic scripts, Thai, Lao
                      (cp >= 0x10A0 && cp <= 0x10FF) || (cp >= 0x1200 && cp <= 0x137F) ||  // Georgian, Ethiopic
                      (cp >= 0x1E00 && cp <= 0x1FFF) ||                                    // Latin (Vietnamese), Greek
                      (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0x3400 && cp <= 0x9FFF) ||  // kana, CJK
                      (cp >= 0xAC00 && cp <= 0xD7AF) ||                                    // Hangul
                      (cp >= 0xFF21 && cp <= 0xFF3A) || (cp >= 0xFF41 && cp <= 0xFF5A);    // full-width
  return letter ? 'a' : '#';
}

std::vector<Unit> Normalize(std::string_view text) {
  std::vector<Unit> units;
  units.reserve(text.size());
  size_t at = 0;
  while (at < text.size()) {
    const size_t begin = at;
    const char c = Classify(NextCodePoint(text, &at));
    if (c != 0) units.push_back({c, begin, at});
  }
  return units;
}

// The networks' issuer prefixes and the lengths they issue.
struct IssuerRange {
  int prefix_digits;
  int low, high;  // prefix range, inclusive
  size_t min_length, max_length;
};
constexpr IssuerRange kIssuerRanges[] = {
    {1, 4, 4, 13, 13},       {1, 4, 4, 16, 16},       {1, 4, 4, 19, 19},    // Visa
    {2, 51, 55, 16, 16},     {4, 2221, 2720, 16, 16},                       // Mastercard
    {2, 34, 34, 15, 15},     {2, 37, 37, 15, 15},                           // Amex
    {3, 300, 305, 14, 19},   {2, 36, 36, 14, 19},     {2, 38, 39, 14, 19},  // Diners
    {4, 3528, 3589, 16, 19},                                                // JCB
    {4, 6011, 6011, 16, 19}, {3, 644, 649, 16, 19},   {2, 65, 65, 16, 19},  // Discover
    {2, 62, 62, 16, 19},                                                    // UnionPay
    {4, 2200, 2204, 16, 19},                                                // Mir
    {2, 81, 82, 16, 19},                                                    // RuPay
    {4, 9792, 9792, 16, 19},                                                // Troy
    {1, 1, 1, 15, 15},                                                      // UATP
    {2, 50, 50, 13, 19},     {2, 56, 69, 13, 19},                           // Maestro, but its rare 12-digit cards
};

// The number the first `count` (1-4) of `digits` make.
int PrefixOf(std::string_view digits, int count) {
  int value = 0;
  for (int k = 0; k < count; ++k) value = value * 10 + (digits[static_cast<size_t>(k)] - '0');
  return value;
}

// Whether `digits` starts with an issuer prefix of a network that issues this length.
bool IssuedLength(std::string_view digits) {
  for (const IssuerRange& r : kIssuerRanges) {
    if (digits.size() < r.min_length || digits.size() > r.max_length) continue;
    const int prefix = PrefixOf(digits, r.prefix_digits);
    if (prefix >= r.low && prefix <= r.high) return true;
  }
  return false;
}

bool CardShaped(std::string_view digits) {
  return digits.size() >= 12 && digits.size() <= 19 && IssuedLength(digits) && LuhnValid(digits);
}

bool HoldsLuhnWindow(const std::string& digits) {
  for (size_t length = 12; length <= 19 && length <= digits.size(); ++length) {
    for (size_t start = 0; start + length <= digits.size(); ++start) {
      if (LuhnValid(std::string_view(digits).substr(start, length))) return true;
    }
  }
  return false;
}

// Whether some of `digits` in a row have a card network's prefix and length and pass Luhn. Each
// start is tried against the prefixes first, so a long run costs a few comparisons a digit
// (log lines can quote long numbers, and the formatter runs under the sink's lock).
// `starts_before`: only windows that begin before that digit.
bool HoldsCardShapedWindow(std::string_view digits, size_t starts_before = std::string_view::npos) {
  for (size_t start = 0; start + 13 <= digits.size() && start < starts_before; ++start) {
    const std::string_view rest = digits.substr(start);
    for (const IssuerRange& r : kIssuerRanges) {
      const int prefix = PrefixOf(rest, r.prefix_digits);
      if (prefix < r.low || prefix > r.high) continue;
      for (size_t length = std::max<size_t>(r.min_length, 13); length <= r.max_length && length <= rest.size();
           ++length) {
        if (LuhnValid(rest.substr(0, length))) return true;
      }
    }
  }
  return false;
}

// Reads the number of at most `max_digits` digits at units[*at], advancing *at; -1 for none.
long NumberAt(const std::vector<Unit>& units, size_t* at, size_t max_digits) {
  long value = 0;
  size_t count = 0;
  while (*at < units.size() && IsDigit(units[*at].c)) {
    if (++count > max_digits) return -1;
    value = value * 10 + (units[(*at)++].c - '0');
  }
  return count == 0 ? -1 : value;
}

// Whether an IPv4 address ("10.244.13.201", four numbers 0-255 joined by dots), with a port or
// not (":45678"), starts at units[i]; *end is then just past it.
bool PlainAddressAt(const std::vector<Unit>& units, size_t i, size_t* end) {
  if (i > 0 && (IsDigit(units[i - 1].c) || units[i - 1].c == '.')) return false;
  size_t at = i;
  for (int octet = 0; octet < 4; ++octet) {
    if (octet > 0 && (at >= units.size() || units[at++].c != '.')) return false;
    const long value = NumberAt(units, &at, 3);
    if (value < 0 || value > 255) return false;
  }
  if (at + 1 < units.size() && units[at].c == '.' && IsDigit(units[at + 1].c)) return false;  // a fifth number
  if (at + 1 < units.size() && units[at].c == ':' && IsDigit(units[at + 1].c)) {
    size_t port_end = at + 1;
    const long port = NumberAt(units, &port_end, 5);
    if (port < 0 || port > 65535) return false;
    at = port_end;
  }
  *end = at;
  return true;
}

// An address as log lines name their peers, to be left out of runs: *end is just past what to
// leave. Digits that follow it within kMaxSeparators, beginning no other address ("10.0.0.1:5000,
// 10.0.0.2:5000"), may continue a card its numbers began: after a port, the port is left to join
// them ("10.0.0.7:5555 5555 5555 4444"); without one, the whole address ("41.111.111.111 11111").
bool AddressAt(const std::vector<Unit>& units, size_t i, size_t* end) {
  if (!PlainAddressAt(units, i, end)) return false;
  size_t next = *end;
  while (next < units.size() && next - *end < kMaxSeparators && IsSeparator(units[next].c)) ++next;
  if (next == *end || next >= units.size() || !IsDigit(units[next].c)) return true;
  size_t next_end = 0;
  if (PlainAddressAt(units, next, &next_end)) return true;
  size_t port = *end;
  while (port > i && IsDigit(units[port - 1].c)) --port;
  if (port == i || units[port - 1].c != ':') return false;
  *end = port;
  return true;
}

// Whether a valid IPv6 address in brackets, with a port or not ("[fd00:10:244:81::8675]:40583",
// as log lines and the trail name IPv6 peers: common/host_port.h), starts at units[i] (its '[')
// and is to be left out of runs; *end is then just past what to leave. Not left: one whose
// numbers, joined as runs are, hold a card-shaped number ("[2001:db8::4111:1111:1111:1111]": an
// attacker chooses the low half of their source address); and as for IPv4 (AddressAt), digits
// that follow join its port, or the whole address where it has none.
bool BracketedAddressAt(const std::vector<Unit>& units, size_t i, size_t* end) {
  if (units[i].c != '[') return false;
  const auto is_hex = [](char c) { return IsDigit(c) || c == 'h'; };
  size_t at = i + 1;
  int groups = 0;
  bool elided = false;  // "::" seen
  while (at < units.size() && units[at].c != ']') {
    if (units[at].c == ':') {
      if (at + 1 < units.size() && units[at + 1].c == ':') {
        if (elided) return false;
        elided = true;
        at += 2;
        continue;
      }
      if (groups == 0) return false;
      ++at;
      continue;
    }
    size_t group_end = at;
    while (group_end < units.size() && group_end - at < 5 && is_hex(units[group_end].c)) ++group_end;
    if (group_end == at) return false;
    if (group_end < units.size() && units[group_end].c == '.') {  // a dotted quad ends it: "::ffff:10.0.0.1"
      size_t quad_end = 0;
      if (!PlainAddressAt(units, at, &quad_end) || quad_end >= units.size() || units[quad_end].c != ']') return false;
      groups += 2;
      at = quad_end;
      break;
    }
    if (group_end - at > 4) return false;
    ++groups;
    at = group_end;
  }
  if (at >= units.size() || units[at].c != ']' || groups > 8 || (!elided && groups != 8) || (elided && groups > 7)) {
    return false;
  }
  // Its numbers joined as a run would join them.
  std::string digits;
  for (size_t u = i + 1; u < at; ++u) {
    if (IsDigit(units[u].c)) {
      digits.push_back(units[u].c);
    } else if (units[u].c == 'h') {
      if (HoldsCardShapedWindow(digits)) return false;
      digits.clear();
    }
  }
  if (HoldsCardShapedWindow(digits)) return false;
  ++at;  // past ']'
  size_t port = 0;
  if (at + 1 < units.size() && units[at].c == ':' && IsDigit(units[at + 1].c)) {
    port = at + 1;
    size_t port_end = port;
    const long value = NumberAt(units, &port_end, 5);
    if (value < 0 || value > 65535) return false;
    at = port_end;
  }
  *end = at;
  size_t next = at;
  while (next < units.size() && next - at < kMaxSeparators && IsSeparator(units[next].c)) ++next;
  if (next == at || next >= units.size() || !IsDigit(units[next].c)) return true;
  if (port == 0) return false;
  *end = port;
  return true;
}

// Calls `on_pan(first, last)` with the units of each PAN candidate run, in order: digits with up
// to kMaxSeparators separators between them, holding what `rule` looks for. kLogLine: an IPv4
// address is no part of a run.
template <typename F>
void ForEachPanRun(const std::vector<Unit>& units, PanRule rule, F on_pan, bool leave_addresses = true) {
  const bool log_line = rule == PanRule::kLogLine;
  const bool addresses = log_line && leave_addresses;
  size_t i = 0;
  while (i < units.size()) {
    size_t address_end = 0;
    if (addresses && BracketedAddressAt(units, i, &address_end)) {
      i = address_end;
      continue;
    }
    if (!IsDigit(units[i].c)) {
      ++i;
      continue;
    }
    if (addresses && AddressAt(units, i, &address_end)) {
      i = address_end;
      continue;
    }
    std::string digits;
    size_t last = i;
    size_t j = i;
    while (j < units.size()) {
      if (IsDigit(units[j].c)) {
        digits.push_back(units[j].c);
        last = j++;
        continue;
      }
      size_t k = j;
      while (k < units.size() && k - j < kMaxSeparators && IsSeparator(units[k].c)) ++k;
      if (k == j || k >= units.size() || !IsDigit(units[k].c)) break;
      if (addresses && AddressAt(units, k, &address_end)) break;
      j = k;
    }
    const bool found = log_line ? HoldsCardShapedWindow(digits) : digits.size() >= 12 && HoldsLuhnWindow(digits);
    if (found) on_pan(i, last);
    i = last + 1;
  }
}

// A card number, or one padded with zeros in front, behind or both, to any width (a trace id's
// 32 digits, a 64-digit token, "04111111111111111"). Behind, the padding cannot be told from the
// card's own trailing zeros, so every card length that ends in the padding is tried (a card never
// begins with 0).
bool CardShapedOrZeroPadded(std::string_view digits) {
  if (CardShaped(digits)) return true;
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return false;
  const size_t last = digits.find_last_not_of('0');
  if (first == 0 && last + 1 == digits.size()) return false;  // no padding: not a card (above)
  for (size_t length = std::max<size_t>(12, last + 1 - first); length <= 19; ++length) {
    if (first + length > digits.size()) break;
    if (CardShaped(digits.substr(first, length))) return true;
  }
  return false;
}

// Whether groups[first..first+count) are grouped as cards are printed.
bool PrintedAsACard(const std::vector<std::string>& groups, size_t first, size_t count) {
  static const std::vector<std::vector<size_t>> kLayouts = {
      {4, 4, 4, 4}, {4, 6, 5}, {4, 6, 4}, {8, 8},  // 16, Amex 15, Diners 14, 16 in halves
  };
  for (const std::vector<size_t>& layout : kLayouts) {
    if (layout.size() != count) continue;
    bool match = true;
    for (size_t g = 0; match && g < count; ++g) match = groups[first + g].size() == layout[g];
    if (match) return true;
  }
  // 19 digits, printed 4-4-4-4-3 (or shorter last group).
  if (count == 5) {
    for (size_t g = first; g < first + 4; ++g) {
      if (groups[g].size() != 4) return false;
    }
    return groups[first + 4].size() <= 3;
  }
  return false;
}

// The 64 hex digits of a form txscore makes (a card token: KEYID_ and 64 hex digits, or the 64
// alone; a bundle digest: "sha256:" and 64), or nothing for any other value.
std::optional<std::string_view> ServerHexOf(std::string_view value) {
  constexpr size_t kHexDigits = 64;
  const auto is_hex = [](char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); };
  if (value.size() < kHexDigits || !std::all_of(value.end() - kHexDigits, value.end(), is_hex)) return std::nullopt;
  const std::string_view prefix = value.substr(0, value.size() - kHexDigits);
  const auto key_id_char = [](char c) {
    return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
  };
  const bool made_here = prefix.empty() || prefix == "sha256:" ||
                         (prefix.size() >= 2 && prefix.size() <= 33 && prefix.back() == '_' &&
                          std::all_of(prefix.begin(), prefix.end() - 1, key_id_char));
  if (!made_here) return std::nullopt;
  return value.substr(prefix.size());
}

bool IdentifierHoldsCardNumberImpl(std::string_view value);

// Which card-shaped runs the log-line rule leaves: those wholly inside the 64 hex digits of a
// word shaped as a token or digest txscore makes (its word: letters, digits, ':', '_' and '-'),
// when IdentifierHoldsCardNumber finds no card in the word. A run that begins in the key id in
// front is the caller's text and judged as any run is. Each word's bounds are found once, so a
// long line of many runs costs no more than its length.
class MadeFormWords {
 public:
  MadeFormWords(const std::vector<Unit>& units, std::string_view text) : units_(units), text_(text) {}

  bool Leaves(size_t first, size_t last) {
    for (size_t u = first; u <= last; ++u) {
      if (!InWord(units_[u].c)) return false;
    }
    if (!has_word_ || first < word_first_ || first > word_last_) FindWord(first);
    if (leaves_runs_from_ == kNone || last > word_last_) return false;
    if (units_[first].begin >= leaves_runs_from_) return true;  // wholly inside the hex
    // Begun in the key id: cut only for a card-shaped window that begins there (one wholly in
    // the hex's leading digits is the hex's chance, as above).
    std::string digits;
    size_t in_key_id = 0;
    for (size_t u = first; u <= last; ++u) {
      if (!IsDigit(units_[u].c)) continue;
      digits.push_back(units_[u].c);
      if (units_[u].begin < leaves_runs_from_) ++in_key_id;
    }
    return !HoldsCardShapedWindow(digits, in_key_id);
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  static bool InWord(char c) { return IsDigit(c) || c == 'h' || c == 'a' || c == ':' || c == '_' || c == '-'; }

  void FindWord(size_t at) {
    word_first_ = word_last_ = at;
    while (word_first_ > 0 && InWord(units_[word_first_ - 1].c)) --word_first_;
    while (word_last_ + 1 < units_.size() && InWord(units_[word_last_ + 1].c)) ++word_last_;
    has_word_ = true;
    const size_t begin = units_[word_first_].begin;
    const std::string_view word = text_.substr(begin, units_[word_last_].end - begin);
    const std::optional<std::string_view> hex = ServerHexOf(word);
    leaves_runs_from_ =
        hex.has_value() && !IdentifierHoldsCardNumberImpl(word) ? begin + word.size() - hex->size() : kNone;
  }

  const std::vector<Unit>& units_;
  std::string_view text_;
  bool has_word_ = false;
  size_t word_first_ = 0, word_last_ = 0;
  size_t leaves_runs_from_ = kNone;  // byte offset of the word's hex, when its runs are left
};

}  // namespace

bool LuhnValid(std::string_view digits) {
  if (digits.empty()) return false;
  int sum = 0;
  bool double_it = false;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (*it < '0' || *it > '9') return false;
    int d = *it - '0';
    if (double_it) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double_it = !double_it;
  }
  return sum % 10 == 0;
}

bool LooksLikeCardNumber(std::string_view text) {
  const std::vector<Unit> units = Normalize(text);
  size_t i = 0;
  while (i < units.size()) {
    if (!IsDigit(units[i].c)) {
      ++i;
      continue;
    }
    // The run's groups of contiguous digits, split at up to three characters that are neither
    // letters nor digits ("4111|1111|1111|1111", "4111 - 1111 - ...", "4111#1111#...").
    std::vector<std::string> groups(1);
    size_t end = i;
    while (end < units.size()) {
      if (IsDigit(units[end].c)) {
        groups.back().push_back(units[end++].c);
        continue;
      }
      size_t next = end;
      while (next < units.size() && next - end < kMaxSeparators && IsSeparator(units[next].c)) ++next;
      if (next == end || next >= units.size() || !IsDigit(units[next].c)) break;
      groups.emplace_back();
      end = next;
    }
    // Letters around a number do not hide it ("REQ4000001234567899", "card4111...",
    // "4111...f"), hex letters included, so a hex id's digit run that happens to be card-shaped
    // is refused too (PanScan.HowOftenRandomIdsAndTokensLookLikeCards counts how often). Groups
    // joined by separators are one number only as cards are printed; otherwise, as a date's or
    // a UUID's groups, each group is a number of its own. Every stretch of groups printed as a
    // card is tried, joined (a card number may stand between other numbers of the same id:
    // "ORD-2026-4000-0012-3456-7899").
    for (size_t first = 0; first < groups.size(); ++first) {
      for (size_t count = 2; count <= 5 && first + count <= groups.size(); ++count) {
        if (!PrintedAsACard(groups, first, count)) continue;
        std::string digits;
        for (size_t g = first; g < first + count; ++g) digits += groups[g];
        if (CardShaped(digits)) return true;
      }
    }
    for (const std::string& group : groups) {
      if (CardShapedOrZeroPadded(group)) return true;
    }
    i = end;
  }
  return false;
}

bool IdentifierHoldsCardNumber(std::string_view value) { return IdentifierHoldsCardNumberImpl(value); }

namespace {

bool IdentifierHoldsCardNumberImpl(std::string_view value) {
  const std::optional<std::string_view> hex = ServerHexOf(value);
  if (!hex.has_value()) return LooksLikeCardNumber(value);
  if (std::all_of(hex->begin(), hex->end(), IsDigit)) return LooksLikeCardNumber(value);
  // The key id in front is the caller's text as much as the rest: it is judged with the digits
  // that continue it ("4111111111111111_" and hex, "41111111_11111111" and hex letters), but a
  // card those digits make alone is the hex's chance, as above.
  const std::string_view prefix = value.substr(0, value.size() - hex->size());
  const std::string_view leading = hex->substr(0, std::find_if_not(hex->begin(), hex->end(), IsDigit) - hex->begin());
  return LooksLikeCardNumber(prefix) ||
         (LooksLikeCardNumber(value.substr(0, prefix.size() + leading.size())) && !LooksLikeCardNumber(leading));
}

}  // namespace

Status RefuseCardNumberIn(std::string_view value, const char* field) {
  if (!LooksLikeCardNumber(value)) return Status::Ok();
  return InvalidArgument(
      "holds what looks like a card number (a Luhn-valid run of digits with a card network's prefix and length); "
      "card numbers belong in card_number only",
      field);
}

Status RefuseCardNumberInLoggedId(std::string_view value, const char* field) {
  if (Status refused = RefuseCardNumberIn(value, field); !refused.ok()) return refused;
  // What a log line would keep of the id, scanned again with nothing left out (no address, no
  // token's hex): a card-shaped run still there is one the log-line rule leaves.
  const std::string logged = RedactPans(value, nullptr, PanRule::kLogLine);
  bool left = false;
  ForEachPanRun(
      Normalize(logged), PanRule::kLogLine, [&](size_t, size_t) { left = true; }, /*leave_addresses=*/false);
  if (!left) return Status::Ok();
  return InvalidArgument(
      "holds what looks like a card number (a Luhn-valid run of digits with a card network's prefix and length, "
      "written as an address or in a word shaped as the tokens txscore makes); card numbers belong in card_number "
      "only",
      field);
}

bool ContainsPan(std::string_view text) {
  bool found = false;
  ForEachPanRun(Normalize(text), PanRule::kFreeText, [&](size_t, size_t) { found = true; });
  return found;
}

std::string RedactPans(std::string_view text, int* redactions, PanRule rule) {
  const std::vector<Unit> units = Normalize(text);
  std::string out;
  size_t copied = 0;
  int count = 0;
  MadeFormWords made_forms(units, text);
  ForEachPanRun(units, rule, [&](size_t first, size_t last) {
    if (rule == PanRule::kLogLine && made_forms.Leaves(first, last)) return;
    out.append(text.substr(copied, units[first].begin - copied));
    out.append(kRedactedPan);
    copied = units[last].end;
    ++count;
  });
  out.append(text.substr(copied));
  if (redactions != nullptr) *redactions = count;
  return out;
}

}  // namespace txscore
