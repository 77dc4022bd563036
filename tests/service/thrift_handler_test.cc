#include "service/thrift_handler.h"

#include <gtest/gtest.h>

namespace txscore::service {
namespace {

TEST(TakeFromThrift, ConvertsThenWipesTheCardFieldsOfTheWireStruct) {
  rpc::Transaction wire;
  wire.request_id = "r1";
  wire.__set_card_number("4000001234567899");
  wire.__set_card_verification_code("737");
  const fraud::RawTransaction raw = TakeFromThrift(wire);
  EXPECT_EQ(raw.card_number.value_or(""), "4000001234567899");
  EXPECT_EQ(raw.card_verification_code.value_or(""), "737");
  EXPECT_EQ(raw.request_id, "r1");
  EXPECT_EQ(wire.card_number, "");
  EXPECT_EQ(wire.card_verification_code, "");
  EXPECT_EQ(wire.request_id, "r1");  // only the card fields are touched
}

}  // namespace
}  // namespace txscore::service
