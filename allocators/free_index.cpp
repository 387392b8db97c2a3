// The free index: every free, unfenced chunk, searchable for the best fit in O(log n).
#include "free_index.h"

#include <algorithm>
#include <bit>

namespace gpumem::detail {
namespace {

// Strict (size, base) order of two records.
bool key_less(const Chunk& a, const Chunk& b) noexcept {
  return a.size < b.size || (a.size == b.size && a.base < b.base);
}

// Splits the treap at `root` into the nodes ordered before `key` (into *before) and the rest.
void split(ChunkStore& store, ChunkHandle root, const Chunk& key, ChunkHandle* before,
           ChunkHandle* after) noexcept {
  while (root != kNoChunk) {
    Chunk& node = store[root];
    if (key_less(node, key)) {
      *before = root;
      before = &node.right;
      root = node.right;
    } else {
      *after = root;
      after = &node.left;
      root = node.left;
    }
  }
  *before = kNoChunk;
  *after = kNoChunk;
}

// Joins two treaps where every key of `low` orders before every key of `high`.
ChunkHandle merge(ChunkStore& store, ChunkHandle low, ChunkHandle high) noexcept {
  ChunkHandle result = kNoChunk;
  ChunkHandle* link = &result;
  while (low != kNoChunk && high != kNoChunk) {
    if (store[low].priority > store[high].priority) {
      *link = low;
      link = &store[low].right;
      low = store[low].right;
    } else {
      *link = high;
      link = &store[high].left;
      high = store[high].left;
    }
  }
  *link = low != kNoChunk ? low : high;
  return result;
}

// Deepest treap validate_treap accepts. Random priorities keep a treap's depth near 3 ln n (under 70
// even for 2^32 nodes); anything deeper means broken priorities, and the bound also caps the
// recursion. (A cycle cannot pass: it would break the strict key order.)
constexpr int kMaxTreapDepth = 200;

// Checks order, heap property and class membership of one treap; counts its nodes.
bool validate_treap(const ChunkStore& store, ChunkHandle root, int klass, const Chunk* low,
                    const Chunk* high, std::size_t& nodes, int depth) noexcept {
  if (root == kNoChunk) return true;
  if (depth > kMaxTreapDepth) return false;
  const Chunk& node = store[root];
  if (store.state(root) != ChunkState::free || class_index(node.size) != klass) return false;
  if ((low != nullptr && !key_less(*low, node)) || (high != nullptr && !key_less(node, *high))) {
    return false;
  }
  for (ChunkHandle child : {node.left, node.right}) {
    if (child != kNoChunk && store[child].priority > node.priority) return false;
  }
  ++nodes;
  return validate_treap(store, node.left, klass, low, &node, nodes, depth + 1) &&
         validate_treap(store, node.right, klass, &node, high, nodes, depth + 1);
}

}  // namespace

void FreeIndex::insert(ChunkStore& store, ChunkHandle handle) noexcept {
  Chunk& chunk = store[handle];
  const int klass = class_index(chunk.size);
  // Descend while the path's priorities beat the new node's, then split the rest under it.
  ChunkHandle* link = &roots_[static_cast<std::size_t>(klass)];
  while (*link != kNoChunk && store[*link].priority > chunk.priority) {
    Chunk& node = store[*link];
    link = key_less(chunk, node) ? &node.left : &node.right;
  }
  split(store, *link, chunk, &chunk.left, &chunk.right);
  *link = handle;
  nonempty_[static_cast<std::size_t>(klass) / 64] |= std::uint64_t{1} << (klass % 64);
  ++count_;
}

void FreeIndex::erase(ChunkStore& store, ChunkHandle handle) noexcept {
  Chunk& chunk = store[handle];
  const int klass = class_index(chunk.size);
  ChunkHandle* link = &roots_[static_cast<std::size_t>(klass)];
  while (*link != handle) {
    Chunk& node = store[*link];
    link = key_less(chunk, node) ? &node.left : &node.right;
  }
  *link = merge(store, chunk.left, chunk.right);
  chunk.left = chunk.right = kNoChunk;
  if (roots_[static_cast<std::size_t>(klass)] == kNoChunk) {
    nonempty_[static_cast<std::size_t>(klass) / 64] &= ~(std::uint64_t{1} << (klass % 64));
  }
  --count_;
}

int FreeIndex::next_nonempty(int first) const noexcept {
  if (first >= kClassCount) return -1;
  std::size_t word = static_cast<std::size_t>(first) / 64;
  std::uint64_t bits = nonempty_[word] & (~std::uint64_t{0} << (first % 64));
  while (bits == 0) {
    if (++word == kWords) return -1;
    bits = nonempty_[word];
  }
  return static_cast<int>(word * 64) + std::countr_zero(bits);
}

ChunkHandle FreeIndex::best_fit(const ChunkStore& store, std::size_t size) const noexcept {
  const int klass = class_index(size);
  // Lower bound inside the request's own class.
  ChunkHandle node = roots_[static_cast<std::size_t>(klass)];
  ChunkHandle found = kNoChunk;
  while (node != kNoChunk) {
    const Chunk& chunk = store[node];
    if (chunk.size >= size) {
      found = node;
      node = chunk.left;
    } else {
      node = chunk.right;
    }
  }
  if (found != kNoChunk) return found;
  // Otherwise the smallest chunk of the next non-empty class: all of its sizes are larger.
  const int next = next_nonempty(klass + 1);
  if (next < 0) return kNoChunk;
  node = roots_[static_cast<std::size_t>(next)];
  while (store[node].left != kNoChunk) node = store[node].left;
  return node;
}

ChunkHandle FreeIndex::largest(const ChunkStore& store) const noexcept {
  for (int word = kWords - 1; word >= 0; --word) {
    const std::uint64_t bits = nonempty_[static_cast<std::size_t>(word)];
    if (bits == 0) continue;
    const int klass = word * 64 + 63 - std::countl_zero(bits);
    ChunkHandle node = roots_[static_cast<std::size_t>(klass)];
    while (store[node].right != kNoChunk) node = store[node].right;
    return node;
  }
  return kNoChunk;
}

bool FreeIndex::validate(const ChunkStore& store, std::size_t& chunks) const noexcept {
  chunks = 0;
  std::size_t classes = 0;
  for (int word = 0; word < kWords; ++word) {
    for (std::uint64_t bits = nonempty_[static_cast<std::size_t>(word)]; bits != 0; bits &= bits - 1) {
      const int klass = word * 64 + std::countr_zero(bits);
      if (klass >= kClassCount) return false;
      const ChunkHandle root = roots_[static_cast<std::size_t>(klass)];
      if (root == kNoChunk || !validate_treap(store, root, klass, nullptr, nullptr, chunks, 0)) return false;
      ++classes;
    }
  }
  // A root in a class whose bit is clear would be missed by the walk above; counting roots is one
  // linear pass over a small array, no tree walk.
  const auto roots = std::count_if(roots_.begin(), roots_.end(), [](ChunkHandle root) { return root != kNoChunk; });
  return static_cast<std::size_t>(roots) == classes && chunks == count_;
}

}  // namespace gpumem::detail
