#include "common/wipe.h"

#include <gtest/gtest.h>

#include <string>

namespace txscore {
namespace {

// The bytes the string held are zeroed, not only its length (clear() would leave them): read
// through the same buffer, which clear() keeps.
TEST(WipeString, ZeroesTheBytesItHeldAndEmptiesTheString) {
  for (std::string secret : {std::string("4111111111111111"), std::string("737")}) {  // heap and in-object
    const size_t size = secret.size();
    const char* buffer = secret.data();
    WipeString(&secret);
    EXPECT_TRUE(secret.empty());
    ASSERT_EQ(secret.data(), buffer);
    EXPECT_EQ(std::string(buffer, size), std::string(size, '\0'));
  }
}

}  // namespace
}  // namespace txscore
