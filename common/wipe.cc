#include "common/wipe.h"

#include <openssl/crypto.h>

namespace txscore {

void WipeBytes(void* data, size_t size) {
  if (size > 0) OPENSSL_cleanse(data, size);
}

void WipeString(std::string* secret) {
  if (!secret->empty()) OPENSSL_cleanse(secret->data(), secret->size());
  secret->clear();
}

}  // namespace txscore
