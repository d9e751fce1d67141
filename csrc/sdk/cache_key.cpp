#include "shimkit/cache_key.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace shimkit {

CacheKey& CacheKey::add(int64_t value) {
  words_.push_back(value);
  return *this;
}

CacheKey& CacheKey::add_double(double value) {
  // -0.0 == 0.0 and every NaN behave alike in a graph; other distinct bit patterns do not.
  if (value == 0.0) value = 0.0;
  if (std::isnan(value)) value = std::numeric_limits<double>::quiet_NaN();
  int64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return add(bits);
}

CacheKey& CacheKey::add_shape(const std::vector<int64_t>& sizes) {
  add(static_cast<int64_t>(sizes.size()));
  for (int64_t size : sizes) add(size);
  return *this;
}

std::size_t CacheKey::hash() const {
  std::size_t hash = std::hash<std::string>{}(op_);
  for (int64_t word : words_) {
    hash ^= std::hash<int64_t>{}(word) + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
  }
  return hash;
}

std::string CacheKey::to_string() const {
  std::string text = op_ + "(";
  for (std::size_t i = 0; i < words_.size(); ++i) {
    if (i) text += ",";
    text += std::to_string(words_[i]);
  }
  return text + ")";
}

}  // namespace shimkit
