#include "fraud/country.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace txscore::fraud {
namespace {

TEST(IsIsoCountry, AcceptsAssignedCodesOnly) {
  EXPECT_TRUE(IsIsoCountry("US"));
  EXPECT_TRUE(IsIsoCountry("DE"));
  EXPECT_TRUE(IsIsoCountry("ZW"));
  for (const char* code : {"QQ", "XX", "AB", "ZZ", "UK", "us", "USA", "", "U"})
    EXPECT_FALSE(IsIsoCountry(code)) << code;
}

TEST(IsIsoCountry, AgreesWithDebiansIsoCodesOnEveryPair) {
  // Debian's iso-codes package (installed by scripts/setup.sh) is the independent reference.
  std::ifstream in("/usr/share/iso-codes/json/iso_3166-1.json");
  ASSERT_TRUE(in) << "install Debian's iso-codes (scripts/setup.sh does)";
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::set<std::string> assigned;
  for (const auto& country : doc.at("3166-1")) assigned.insert(country.at("alpha_2").get<std::string>());
  ASSERT_GE(assigned.size(), 249u);
  for (char a = 'A'; a <= 'Z'; ++a) {
    for (char b = 'A'; b <= 'Z'; ++b) {
      const std::string code{a, b};
      EXPECT_EQ(IsIsoCountry(code), assigned.count(code) == 1) << code;
    }
  }
}

}  // namespace
}  // namespace txscore::fraud
