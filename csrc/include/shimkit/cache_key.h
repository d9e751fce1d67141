// A key naming one compiled graph: equal keys must mean the same graph, different graphs must get
// different keys.
//
// The key is a flat list of integers under an op name, written by the kernel's plan from exactly the
// facts its graph builder reads. Doubles go in by their bit pattern (after canonicalising -0.0 and
// NaN), so 1.0 and 1.0000000001 never share a graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shimkit {

class CacheKey {
 public:
  CacheKey() = default;
  explicit CacheKey(std::string op) : op_(std::move(op)) {}

  CacheKey& add(int64_t value);
  CacheKey& add_bool(bool value) { return add(value ? 1 : 0); }
  CacheKey& add_double(double value);
  // Length-prefixed, so [2, 3] + [4] and [2] + [3, 4] differ.
  CacheKey& add_shape(const std::vector<int64_t>& sizes);

  const std::string& op() const { return op_; }
  const std::vector<int64_t>& words() const { return words_; }
  std::size_t hash() const;
  std::string to_string() const;

  bool operator==(const CacheKey& other) const { return op_ == other.op_ && words_ == other.words_; }
  bool operator!=(const CacheKey& other) const { return !(*this == other); }

 private:
  std::string op_;
  std::vector<int64_t> words_;
};

struct CacheKeyHash {
  std::size_t operator()(const CacheKey& key) const { return key.hash(); }
};

}  // namespace shimkit
