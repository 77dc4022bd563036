#include "common/pan_scan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "common/logged_id.h"

namespace txscore {
namespace {

TEST(PanScan, FindsPansWrittenTheWaysPeopleWriteThem) {
  EXPECT_TRUE(ContainsPan("4000001234567899"));
  EXPECT_TRUE(ContainsPan("card 4000 0012 3456 7899 was used"));
  EXPECT_TRUE(ContainsPan("4000-0012-3456-7899"));
  EXPECT_TRUE(ContainsPan("4000.0012.3456.7899"));
  EXPECT_TRUE(ContainsPan("ref:x4000001234567899y"));
  EXPECT_TRUE(ContainsPan("378282246310005"));      // 15-digit Amex test number
  EXPECT_TRUE(ContainsPan("12 4000001234567899"));  // inside a longer run: every window is checked
}

TEST(PanScan, LeavesOtherNumbersAlone) {
  EXPECT_FALSE(ContainsPan("4000001234567898"));  // Luhn fails
  EXPECT_FALSE(ContainsPan("40000012345"));       // 11 digits
  EXPECT_FALSE(ContainsPan("claim on 2024-05-06, policy POL-88123, 3 prior claims, 1200.50 EUR"));
  EXPECT_FALSE(ContainsPan("4000    0012 3456 7899"));  // four separators in a row end the run: 12 digits fail Luhn
  EXPECT_FALSE(ContainsPan(""));
}

// The forms a card number took past the scanner before it normalized text (issue 29, item 8).
TEST(PanScan, FindsPansInFreeTextWrittenWithOtherSeparatorsDigitsAndHiddenCharacters) {
  for (
      const char* text : {
          "4000  0012  3456  7899",              // double spaces
          "4000 - 0012 - 3456 - 7899",           // " - "
          "4000/0012/3456/7899",                 // slashes
          "4000,0012,3456,7899",                 // commas
          "4000\t0012\t3456\t7899",              // tabs
          "4000\u00a00012\u00a03456\u00a07899",  // no-break spaces
          "4000\u20130012\u20133456\u20137899",  // en dashes
          "4000:0012:3456:7899",                 // colons
          "4000+0012+3456+7899",                 // plus signs
          "4000|0012|3456|7899",                 // bars
          "4000;0012;3456;7899",                 // semicolons
          "4000 0012\n3456 7899",                // a line break
          "4000 0012\r\n3456 7899",              // CR LF
          "4000\u20280012\u20283456\u20287899",  // line separators
          "4\ufe0f000001234567899",              // a variation selector
          "\uff14\uff10\uff10\uff10\uff10\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19\uff19",  // full-width
          "\u0664\u0660\u0660\u0660\u0660\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0669",  // Arabic-Indic
          "4000\u200d0012\u200b3456\u20607899",  // zero-width joiner, space, word joiner
          "4\u00ad000001234567899",              // a soft hyphen
      }) {
    EXPECT_TRUE(ContainsPan(text)) << text;
    EXPECT_EQ(RedactPans(std::string("paid ") + text + " ok"), "paid [card number redacted] ok") << text;
  }
}

// `prefix` and the digit that makes it pass the Luhn check.
std::string WithCheckDigit(const std::string& prefix) {
  for (char d = '0'; d <= '9'; ++d) {
    if (LuhnValid(prefix + d)) return prefix + d;
  }
  return prefix;
}

TEST(PanScan, FreeTextFindsACardSplitByAnyCharacterThatIsNotALetter) {
  for (const char* text : {"paid 4000*0012*3456*7899 today", "ref=4000=0012=3456=7899", "#4000#0012#3456#7899",
                           "(4000) (0012) (3456) (7899)", "4000~0012~3456~7899", "4000 \"0012\" 3456 7899"}) {
    EXPECT_TRUE(ContainsPan(text)) << text;
    EXPECT_EQ(RedactPans(text).find("0012"), std::string::npos) << text;
  }
  EXPECT_FALSE(ContainsPan("4000x0012x3456x7899"));                 // letters end a run: "x" is no separator
  EXPECT_FALSE(ContainsPan("4000\u5e740012\u5e743456\u5e747899"));  // nor is a letter of another script
  for (const char* text : {"4111\u20221111\u20221111\u20221111", "4111\u00b71111\u00b71111\u00b71111",
                           "4111\xff"
                           "1111\xff"
                           "1111\xff"
                           "1111",
                           "4111\u00d71111\u00d71111\u00d71111"}) {
    EXPECT_TRUE(ContainsPan(text)) << text;  // a bullet, a middle dot, a byte that is not UTF-8, a sign
  }
  // Punctuation inside the blocks of scripts whose letters end a run separates as ASCII's does:
  // the Greek question mark and ano teleia, the Arabic comma (between Arabic-Indic digits), the
  // Hebrew maqaf, the Devanagari danda, the Armenian full stop.
  for (const char* text :
       {"4111\u037e1111\u037e1111\u037e1111", "4111\u03871111\u03871111\u03871111",
        "\u0664\u0661\u0661\u0661\u060c\u0661\u0661\u0661\u0661\u060c\u0661\u0661\u0661\u0661"
        "\u060c\u0661\u0661\u0661\u0661",
        "3782\u05be822463\u05be10005", "4111\u09641111\u09641111\u09641111", "4111\u05891111\u05891111\u05891111"}) {
    EXPECT_TRUE(ContainsPan(text)) << text;
    EXPECT_TRUE(LooksLikeCardNumber(text)) << text;
  }
  // And letters of those scripts end a run: Thai, Georgian, Armenian, Ethiopic, Vietnamese.
  for (const char* letter : {"\u0e2d", "\u10d0", "\u0561", "\u1200", "\u1ec7"}) {
    const std::string text = std::string("4111") + letter + "1111" + letter + "1111" + letter + "1111";
    EXPECT_FALSE(ContainsPan(text)) << text;
  }
}

TEST(PanScan, IdsHidingACardBehindOtherSeparatorsOrGroupingsAreFound) {
  for (const char* id : {
           "4000/0012/3456/7899", "4000:0012:3456:7899", "4000,0012,3456,7899", "4000+0012+3456+7899",
           "REQ-4000\u20130012\u20133456\u20137899",  // en dashes
           "REQ-\uff14\uff10\uff10\uff10\uff10\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19\uff19",
           "3056-930902-5904",                                         // Diners 14, printed 4-6-4
           "40000012-34567899",                                        // 16 in halves
           "4000\u200b001234567899",                                   // a zero-width space inside
           "REQ4111111111111111",                                      // glued to letters
           "00-00000000000000004111111111111111-00f067aa0ba902b7-01",  // a W3C traceparent, zero-padded trace id
           "0000000000000000000000000000000000000000000000004111111111111111",  // a 64-digit token form
           "00-41111111111111110000000000000000-00f067aa0ba902b7-01",           // a trace id padded behind
           "00-00000000510510510510510000000000-00f067aa0ba902b7-01",           // padded on both sides
           "id 40000000000000100000",  // a card ending in 0, padded behind to 20 digits
       }) {
    EXPECT_TRUE(LooksLikeCardNumber(id)) << id;
  }
  // Networks the rule did not know: UATP (1, 15 digits), RuPay (81-82), Troy (9792).
  for (std::string prefix : {"13541234567891", "817199992766000", "979200001234567"}) {
    const std::string card = WithCheckDigit(prefix);
    EXPECT_TRUE(LooksLikeCardNumber("id " + card)) << card;
  }
}

TEST(PanScan, AnIdLooksLikeACardNumberOnlyWithANetworksPrefixLengthAndLuhn) {
  EXPECT_TRUE(LooksLikeCardNumber("4000001234567899"));
  EXPECT_TRUE(LooksLikeCardNumber("REQ-4000-0012-3456-7899"));
  EXPECT_TRUE(LooksLikeCardNumber("x-4000001234567899"));
  EXPECT_TRUE(LooksLikeCardNumber("x4000001234567899"));  // glued to a letter: found all the same
  EXPECT_TRUE(LooksLikeCardNumber("REQ4000001234567899"));
  // Glued to hex letters too: a trace id that begins with a card and goes on in a-f, ids that
  // glue one to a word of a-f letters, and card groups split by other characters or by several.
  for (const char* id :
       {"00-4111111111111111aaaaaaaaaaaaaaaa-00f067aa0ba902b7-01", "card4111111111111111", "e4111111111111111",
        "4111111111111111a", "feed4111111111111111", "371449635398431F", "4111|1111|1111|1111", "4111;1111;1111;1111",
        "4111*1111*1111*1111", "4111#1111#1111#1111", "4111=1111=1111=1111", "4111~1111~1111~1111",
        "(4111)(1111)(1111)(1111)", "4111--1111--1111--1111", "P-4111|1111|1111|1111"}) {
    EXPECT_TRUE(LooksLikeCardNumber(id)) << id;
  }
  EXPECT_TRUE(LooksLikeCardNumber("378282246310005"));   // Amex, 15
  EXPECT_TRUE(LooksLikeCardNumber("5555555555554444"));  // Mastercard test number
  EXPECT_TRUE(LooksLikeCardNumber("2223003122003222"));  // Mastercard 2-series test number
  // Long numeric ids, which the every-window rule would flag:
  EXPECT_TRUE(ContainsPan("20261201123456788"));
  EXPECT_FALSE(LooksLikeCardNumber("20261201123456788"));      // Luhn-valid, 17 digits, no network's prefix
  EXPECT_FALSE(LooksLikeCardNumber("1000001234567895"));       // Luhn-valid, 16 digits, no network's prefix
  EXPECT_FALSE(LooksLikeCardNumber("4000001234567898"));       // Luhn fails
  EXPECT_FALSE(LooksLikeCardNumber("40000012345678991"));      // a Visa prefix, but 17 digits
  EXPECT_TRUE(LooksLikeCardNumber("40000012345678990"));       // a card and one zero behind it
  EXPECT_TRUE(LooksLikeCardNumber("04111111111111111"));       // a card and one zero in front of it
  EXPECT_TRUE(LooksLikeCardNumber("REQ-0378282246310005"));    // an Amex card and a zero in front
  EXPECT_FALSE(LooksLikeCardNumber("124000001234567899"));     // glued inside a longer run: not found in ids
  EXPECT_TRUE(LooksLikeCardNumber("id 12 4000001234567899"));  // a number of its own
  EXPECT_TRUE(LooksLikeCardNumber("3782-822463-10005"));       // Amex as printed, 4-6-5
  // A printed card between other numbers of the same id.
  EXPECT_TRUE(LooksLikeCardNumber("ORD-2026-4000-0012-3456-7899"));
  EXPECT_TRUE(LooksLikeCardNumber("4000-0012-3456-7899-01"));
  EXPECT_TRUE(LooksLikeCardNumber("4000 0012 3456 7899 1"));
  EXPECT_TRUE(LooksLikeCardNumber("2026-3782-822463-10005"));
  EXPECT_FALSE(LooksLikeCardNumber("ORD-2026-000123"));
  EXPECT_FALSE(LooksLikeCardNumber("TXN_20261201_000001"));
  EXPECT_FALSE(LooksLikeCardNumber("2026-12-01T10:00:00Z"));
  // Separated digits not grouped as cards are printed are separate numbers: a UUID's groups.
  EXPECT_FALSE(LooksLikeCardNumber("400000-1234567899"));
  EXPECT_FALSE(LooksLikeCardNumber("40000012-3456-7899-abcd-0123456789ab"));
  EXPECT_FALSE(LooksLikeCardNumber("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"));
  EXPECT_FALSE(LooksLikeCardNumber("m-US-17"));
}

// Random strings from a fixed generator (std::mt19937_64's output is fixed by the standard), so
// the counts below are exact: README quotes them.
std::string RandomOf(std::mt19937_64& random, const char* alphabet, size_t alphabet_size, size_t length) {
  std::string text;
  for (size_t i = 0; i < length; ++i) text += alphabet[random() % alphabet_size];
  return text;
}

TEST(PanScan, HowOftenRandomIdsAndTokensLookLikeCards) {
  std::mt19937_64 random(1);
  constexpr int kSamples = 100000;
  int uuids = 0, hex_ids = 0, object_ids = 0, traceparents = 0, numeric = 0, numeric15 = 0, hex_tokens = 0;
  for (int i = 0; i < kSamples; ++i) {
    const std::string hex = RandomOf(random, "0123456789abcdef", 16, 32);
    const std::string uuid = hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
                             hex.substr(16, 4) + "-" + hex.substr(20, 12);
    uuids += LooksLikeCardNumber(uuid) ? 1 : 0;
    hex_ids += LooksLikeCardNumber(hex) ? 1 : 0;  // uuid4().hex
    object_ids += LooksLikeCardNumber(hex.substr(0, 24)) ? 1 : 0;
    traceparents +=
        LooksLikeCardNumber("00-" + hex + "-" + RandomOf(random, "0123456789abcdef", 16, 16) + "-01") ? 1 : 0;
    numeric += LooksLikeCardNumber(RandomOf(random, "0123456789", 10, 16)) ? 1 : 0;
    hex_tokens += ContainsPan(RandomOf(random, "0123456789abcdef", 16, 64)) ? 1 : 0;
  }
  std::mt19937_64 random15(2);  // its own stream: the counts above stay comparable across rule changes
  for (int i = 0; i < kSamples; ++i) {
    numeric15 += LooksLikeCardNumber(RandomOf(random15, "0123456789", 10, 15)) ? 1 : 0;
  }
  int numeric20 = 0;
  std::mt19937_64 random20(3);
  for (int i = 0; i < kSamples; ++i) {
    numeric20 += LooksLikeCardNumber(RandomOf(random20, "0123456789", 10, 20)) ? 1 : 0;
  }
  // Hex ids whose digits happen to make a card: letters no longer hide one (all 0 when they did,
  // 4 traceparents).
  EXPECT_EQ(uuids, 1);
  EXPECT_EQ(hex_ids, 42);
  EXPECT_EQ(object_ids, 31);
  EXPECT_EQ(traceparents, 60);
  // A 16-digit numeric id: card-shaped 4.8 % of the time (4,201 before zeros padding a card of
  // 12 to 18 digits counted; 3,989 before RuPay and Troy).
  EXPECT_EQ(numeric, 4793);
  // A 15-digit one: 3.4 % (Amex, UATP, Diners; 3,011 before zero padding counted).
  EXPECT_EQ(numeric15, 3438);
  // A 20-digit one: 0.7 % (a card with zeros around it: only when it begins or ends in 0).
  EXPECT_EQ(numeric20, 679);
  EXPECT_EQ(hex_tokens, 2534);  // txscore's own 64-hex token form, under the free-text rule: 2.5 %
  // A caller's id in that form is refused where a run of its digits holds a card-shaped number.
  int hex64_ids_refused = 0;
  std::mt19937_64 random64(6);
  for (int i = 0; i < kSamples; ++i) {
    hex64_ids_refused += RefuseCardNumberInLoggedId(RandomOf(random64, "0123456789abcdef", 16, 64), "id").ok() ? 0 : 1;
  }
  EXPECT_EQ(hex64_ids_refused, 599);  // 0.6 %: such ids are better avoided (docs/rpc.md)
}

// What txscore makes itself (card tokens, digests) is judged as a caller's card_token is: its
// hex holds a card-shaped digit run by chance, so only 64 decimal digits holding a card count.
TEST(PanScan, ATokensOrDigestsHexHoldsACardOnlyWhenItIsAllDecimalDigitsHoldingOne) {
  const std::string hex = "c0a024ba591a5cfb2aba085b4ea6071762e7934dc514bb340998094460379c4c";  // holds 340998094460379
  EXPECT_TRUE(LooksLikeCardNumber(hex));
  for (const std::string& made : {hex, "k2026_" + hex, "legacy_" + hex, "sha256:" + hex}) {
    EXPECT_FALSE(IdentifierHoldsCardNumber(made)) << made;
  }
  EXPECT_TRUE(IdentifierHoldsCardNumber(std::string(48, '0') + "4111111111111111"));
  EXPECT_TRUE(IdentifierHoldsCardNumber("k1_" + std::string(48, '0') + "4111111111111111"));
  EXPECT_TRUE(IdentifierHoldsCardNumber("REQ-" + hex));  // not a form txscore makes: the id rule
  EXPECT_TRUE(IdentifierHoldsCardNumber("card4111111111111111"));
  EXPECT_FALSE(IdentifierHoldsCardNumber("20261201123456788"));
  std::mt19937_64 random(4);
  int refused = 0;
  for (int i = 0; i < 100000; ++i) {
    refused += IdentifierHoldsCardNumber("k2026_" + RandomOf(random, "0123456789abcdef", 16, 64)) ? 1 : 0;
  }
  EXPECT_EQ(refused, 0);
}

// Log lines name ids, digests and peers: a card-shaped run (a network's prefix and length, Luhn)
// is found in any grouping and glued to any letter, the forms txscore makes are judged as their
// word, and an IPv4 address with its port is no part of a run.
TEST(PanScan, TheLogLineRuleFindsCardsInAnyGroupingAndLeavesAddressesAndMadeForms) {
  const auto log = [](const std::string& text) { return RedactPans(text, nullptr, PanRule::kLogLine); };
  EXPECT_EQ(log("request e94111111111111111 failed"), "request e[card number redacted] failed");
  EXPECT_EQ(log("a41111-11111-111111"), "a[card number redacted]");
  EXPECT_EQ(log("e37828:22463:10005"), "e[card number redacted]");
  EXPECT_EQ(log("4111 1111 1111 1111"), "[card number redacted]");
  // A Luhn-valid number no network issues is no card here (the free-text rule cuts it).
  EXPECT_EQ(log("order 7012345678901232"), "order 7012345678901232");
  EXPECT_EQ(RedactPans("order 7012345678901232"), "order [card number redacted]");
  // Addresses: 10.244.13.201:45678 joined is 102441320145678, a UATP-shaped number.
  EXPECT_EQ(log("from 10.244.13.201:45678: refused"), "from 10.244.13.201:45678: refused");
  EXPECT_EQ(RedactPans("from 10.244.13.201:45678: refused"), "from [card number redacted]: refused");
  EXPECT_EQ(log("on 10.203.179.214:9090 (8 workers)"), "on 10.203.179.214:9090 (8 workers)");
  // Not addresses: a number over 255, a fifth number, a port over 65535.
  EXPECT_EQ(log("411.111.111.111:1111"), "[card number redacted]");
  EXPECT_EQ(log("4.111.111.111.111.111"), "[card number redacted]");
  EXPECT_EQ(log("41.111.111.111:111111"), "[card number redacted]");
  // A card after an address is found all the same, and so is one whose first groups an address
  // (or its port) could be: digits that follow an address and begin no other join its port, or
  // the whole address where it has none.
  EXPECT_EQ(log("10.0.0.1:443 4111 1111 1111 1111"), "10.0.0.1:[card number redacted]");
  EXPECT_EQ(log("peer 10.0.0.7:5555 5555 5555 4444 refused"), "peer 10.0.0.7:[card number redacted] refused");
  EXPECT_EQ(log("1.2.3.4:4111 1111 1111 1111"), "1.2.3.4:[card number redacted]");
  EXPECT_EQ(log("12.34.56.78:3782 822463 10005"), "12.34.56.78:[card number redacted]");
  EXPECT_EQ(log("41.111.111.111 11111"), "[card number redacted]");
  EXPECT_EQ(log("peers 10.0.0.1:5000, 10.0.0.2:5000 and 10.0.0.3:5000 1 left"),
            "peers 10.0.0.1:5000, 10.0.0.2:5000 and 10.0.0.3:5000 1 left");
  // sha256("txscore pipeline bundle 123") holds 3774381013054796: kept as a digest, cut otherwise.
  const std::string hex = "ac9b1680c1171d8c337f244c3774381013054796f43d212966aa8b659e556703";
  EXPECT_EQ(log("bundle sha256:" + hex + " loaded"), "bundle sha256:" + hex + " loaded");
  EXPECT_EQ(log("token k2026_" + hex), "token k2026_" + hex);
  EXPECT_EQ(log("id v" + hex), "id vac9b1680c1171d8c337f244c[card number redacted]f43d212966aa8b659e556703");
  EXPECT_EQ(log("k1_" + std::string(48, '0') + "4111111111111111"), "k[card number redacted]");
  // The key id in front of a token's hex is the caller's text: judged with the digits that
  // continue it, so a card there is cut, the token's hex with it.
  EXPECT_EQ(
      log("on /in/4111111111111111_" + hex + ".jsonl"),
      "on /in/[card number redacted]_ac9b1680c1171d8c337f244c[card number redacted]f43d212966aa8b659e556703.jsonl");
  EXPECT_TRUE(IdentifierHoldsCardNumber("4111111111111111_" + hex));
  EXPECT_TRUE(IdentifierHoldsCardNumber("pan-5555-5555-5555-4444_" + hex));
  EXPECT_TRUE(IdentifierHoldsCardNumber("41111111_11111111" + hex.substr(8)));
  EXPECT_FALSE(IdentifierHoldsCardNumber("k20261204_" + hex));
  // So an id that log lines keep is refused where it comes in when a word of it has that shape
  // and holds a card anywhere (common/logged_id.h); the plain id rule does not see those.
  for (const std::string& id : {"4111111111111111" + hex.substr(16), "k1_ab4111111111111111" + hex.substr(18),
                                "r.4111111111111111337" + hex.substr(19), "order/4111111111111111" + hex.substr(16),
                                "4111111111111111" + hex.substr(16) + ".1"}) {
    EXPECT_FALSE(IdentifierHoldsCardNumber(id.substr(id.find_first_of("0123456789k"))));
    EXPECT_TRUE(RefuseCardNumberIn(id, "request_id").ok()) << id;
    EXPECT_FALSE(RefuseCardNumberInLoggedId(id, "request_id").ok()) << id;
  }
  EXPECT_TRUE(RefuseCardNumberInLoggedId("k1_" + std::string(64, 'a'), "request_id").ok());
  EXPECT_TRUE(RefuseCardNumberInLoggedId("3f2b8c1e-9a4d-4e6f-8b2a-1c3d5e7f9a0b", "request_id").ok());
  // A card beginning in the key id in front of the hex is judged as any run is, however split.
  EXPECT_EQ(log("x 411111111111_1111" + hex.substr(4)), "x [card number redacted]" + hex.substr(8));
  EXPECT_EQ(log("x 4111-1111-1111-111_1" + hex.substr(1)), "x [card number redacted]" + hex.substr(1));
  // IPv6 peers, in brackets as txscore names them, stay whole; a card after one is found.
  EXPECT_EQ(log("by txscore-operator ([fd00:10:244:81::8675]:40583)"),
            "by txscore-operator ([fd00:10:244:81::8675]:40583)");
  EXPECT_EQ(log("[fd00::9981:6601:9009:5558]:37712 4111 1111 1111 1111"),
            "[fd00::9981:6601:9009:5558]:[card number redacted]");
  // Brackets hide nothing else: text that is no valid IPv6 address, one whose numbers make a
  // card (a caller picks the low half of its address), a card around or after one.
  for (const std::string& text :
       {"[::4111111111111111]", "[4111.1111.1111.1111::]", "41111111[11111111::]", "4111 1111 1111 [1111::]",
        "[::1]:4111 1111 1111 1111", "unauthenticated [2001:db8:1:2:4111:1111:1111:1111]:5555"}) {
    EXPECT_EQ(log(text).find("1111 1111"), std::string::npos) << text;
    EXPECT_NE(log(text).find("[card number redacted]"), std::string::npos) << text << " -> " << log(text);
  }
  EXPECT_EQ(log("from [::ffff:10.0.0.1]:443 and [2001:db8::1]"), "from [::ffff:10.0.0.1]:443 and [2001:db8::1]");
  // A request id whose card the log-line rule leaves (an address) is refused where it comes in.
  EXPECT_FALSE(RefuseCardNumberInLoggedId("r-41.111.111.111:11111", "request_id").ok());
  EXPECT_TRUE(RefuseCardNumberIn("r-41.111.111.111:11111", "request_id").ok());
  // txscore's own tokens: their hex is left whole in log lines, but a run begun in the key id is
  // cut where a card-shaped number begins there (it could be a card split by the '_'), so a key
  // id ending in digits costs some tokens their leading digits (a log line's detail, no more).
  std::mt19937_64 random(8);
  std::vector<int> tokens_cut;
  for (const char* key_id : {"legacy_", "k1_", "k20261204_"}) {
    int cut = 0;
    for (int i = 0; i < 100000; ++i) {
      const std::string token = key_id + RandomOf(random, "0123456789abcdef", 16, 64);
      cut += log(token) != token ? 1 : 0;
    }
    tokens_cut.push_back(cut);
  }
  EXPECT_EQ(tokens_cut, (std::vector<int>{0, 21, 569}));  // of 100,000 each
  EXPECT_FALSE(IdentifierHoldsCardNumber("sha256:" + hex));
}

TEST(PanScan, HowOftenTheLogLineRuleCutsIdsAndAddresses) {
  std::mt19937_64 random(5);
  constexpr int kSamples = 100000;
  int uuids = 0, hex_ids = 0, dated = 0, addresses = 0, addresses_by_free_text = 0;
  const auto cut = [](const std::string& text) { return RedactPans(text, nullptr, PanRule::kLogLine) != text; };
  const auto number = [&](int low, int high) { return std::uniform_int_distribution<int>(low, high)(random); };
  for (int i = 0; i < kSamples; ++i) {
    const std::string hex = RandomOf(random, "0123456789abcdef", 16, 32);
    uuids += cut(hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" + hex.substr(16, 4) + "-" +
                 hex.substr(20, 12))
                 ? 1
                 : 0;
    hex_ids += cut(hex) ? 1 : 0;
    char id[32];
    std::snprintf(id, sizeof id, "REQ-2026%02d%02d-%06d", number(1, 12), number(1, 28), number(0, 999999));
    dated += cut(id) ? 1 : 0;
    const std::string address = "10." + std::to_string(number(0, 255)) + "." + std::to_string(number(0, 255)) + "." +
                                std::to_string(number(0, 255)) + ":" + std::to_string(number(1024, 65535));
    addresses += cut(address) ? 1 : 0;
    addresses_by_free_text += RedactPans(address) != address ? 1 : 0;
  }
  // A log line's uuid or uuid4().hex id loses its digits 0.2 % of the time (the id rule at
  // ingress refuses 1 and 42 in 100,000: HowOftenRandomIdsAndTokensLookLikeCards).
  EXPECT_EQ(uuids, 225);
  EXPECT_EQ(hex_ids, 225);
  EXPECT_EQ(dated, 0);  // the id shape docs/rpc.md recommends
  EXPECT_EQ(addresses, 0);
  EXPECT_EQ(addresses_by_free_text, 52079);  // why addresses are left out of runs
  // What the rule cuts that is no card: numbers written close together in a message.
  std::mt19937_64 random_text(7);
  const auto text_number = [&](long low, long high) {
    return std::uniform_int_distribution<long>(low, high)(random_text);
  };
  int spaced_times = 0, byte_counts = 0, address_then_number = 0, iso_times = 0;
  for (int i = 0; i < kSamples; ++i) {
    char text[96];
    std::snprintf(text, sizeof text, "started 2026-%02ld-%02ld %02ld:%02ld:%02ld.%03ld ok", text_number(1, 12),
                  text_number(1, 28), text_number(0, 23), text_number(0, 59), text_number(0, 59), text_number(0, 999));
    spaced_times += cut(text) ? 1 : 0;
    std::snprintf(text, sizeof text, "2026-%02ld-%02ldT%02ld:%02ld:%02ld.%06ldZ", text_number(1, 12),
                  text_number(1, 28), text_number(0, 23), text_number(0, 59), text_number(0, 59),
                  text_number(0, 999999));
    iso_times += cut(text) ? 1 : 0;
    std::snprintf(text, sizeof text, "sizes %ld, %ld, %ld", text_number(1000000, 99999999),
                  text_number(1000000, 99999999), text_number(1000000, 99999999));
    byte_counts += cut(text) ? 1 : 0;
    std::snprintf(text, sizeof text, "10.0.%ld.%ld:%ld %ld", text_number(0, 255), text_number(0, 255),
                  text_number(1, 65535), text_number(100000000, 9999999999));
    address_then_number += cut(text) ? 1 : 0;
  }
  EXPECT_EQ(iso_times, 0);  // how txscore's own lines write times
  EXPECT_EQ(spaced_times, 19119);
  EXPECT_EQ(byte_counts, 78189);
  EXPECT_EQ(address_then_number, 14271);  // the port joins the number after it
}

TEST(PanScan, RedactsEachRunWithItsSeparators) {
  int count = -1;
  EXPECT_EQ(RedactPans("paid with 4000 0012 3456 7899, then 378282246310005.", &count),
            "paid with [card number redacted], then [card number redacted].");
  EXPECT_EQ(count, 2);
  EXPECT_EQ(RedactPans("no card here 1234", &count), "no card here 1234");
  EXPECT_EQ(count, 0);
  EXPECT_EQ(RedactPans("x4000001234567899y"), "x[card number redacted]y");
}

}  // namespace
}  // namespace txscore
