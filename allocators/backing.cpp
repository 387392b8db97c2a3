// The pieces and mappings behind a resizable region.
#include "backing.h"

#include <algorithm>
#include <utility>

#include "piece_layout.h"

namespace gpumem {

Backing::Backing(std::uintptr_t range_base, std::size_t granule, std::size_t largest_piece, std::size_t slab_bytes)
    : range_base_(range_base),
      granule_(granule),
      largest_piece_(largest_piece < granule ? granule : largest_piece),
      slab_bytes_(std::max(granule, slab_bytes / granule * granule)) {}

std::size_t Backing::index_of(std::uintptr_t base) const noexcept {
  const auto found = std::lower_bound(mappings_.begin(), mappings_.end(), base,
                                      [](const Mapping& mapping, std::uintptr_t at) { return mapping.base < at; });
  return found != mappings_.end() && found->base == base ? static_cast<std::size_t>(found - mappings_.begin())
                                                         : mappings_.size();
}

const Backing::Mapping* Backing::mapping_at(std::uintptr_t address) const noexcept {
  auto found = std::upper_bound(mappings_.begin(), mappings_.end(), address,
                                [](std::uintptr_t at, const Mapping& mapping) { return at < mapping.base; });
  if (found == mappings_.begin()) return nullptr;
  --found;
  return address - found->base < found->size ? &*found : nullptr;
}

bool Backing::plan_map(std::uintptr_t at, std::size_t bytes, Kind kind, Plan& plan, std::size_t slab_bytes) const {
  if (slab_bytes == std::size_t(-1)) slab_bytes = slab_bytes_;
  plan = Plan{};
  plan.kind = kind;
  try {
    // Ids for new pieces: the records of pieces gone first, then new records.
    std::size_t next_free = free_ids_.size();
    PieceId next_new = static_cast<PieceId>(pieces_.size());
    const auto add_piece = [&](std::size_t size) {
      const PieceId id = next_free > 0 ? free_ids_[--next_free] : next_new++;
      plan.new_pieces.push_back(size);
      plan.new_ids.push_back(id);
      return id;
    };
    if (kind == Kind::laid_out) {
      for (std::size_t done = 0; done < bytes;) {
        const std::size_t size =
            std::min(bytes - done, piece_bytes_at(at + done - range_base_, granule_, largest_piece_));
        plan.mappings.push_back(Mapping{at + done, size, add_piece(size), 0, false});
        done += size;
      }
      return true;
    }
    const std::size_t granules = bytes / granule_;
    plan.mappings.reserve(granules);
    // Idle slab granules first, from the slabs with the fewest idle ones: a slab mostly idle is left
    // to empty, so that its memory can go back.
    std::vector<PieceId> slabs;
    for (PieceId id = 0; id < pieces_.size(); ++id) {
      if (pieces_[id].live && pieces_[id].slab && !pieces_[id].idle.empty()) slabs.push_back(id);
    }
    std::sort(slabs.begin(), slabs.end(), [&](PieceId a, PieceId b) {
      return pieces_[a].idle.size() != pieces_[b].idle.size() ? pieces_[a].idle.size() < pieces_[b].idle.size()
                                                              : a < b;
    });
    std::size_t done = 0;
    for (const PieceId id : slabs) {
      const std::vector<std::uint32_t>& idle = pieces_[id].idle;
      for (std::size_t k = idle.size(); k > 0 && done < granules; --k, ++done) {
        plan.mappings.push_back(Mapping{at + done * granule_, granule_, id, std::size_t{idle[k - 1]} * granule_, false});
      }
      if (done == granules) break;
    }
    plan.granules_reused = done;
    if (kind == Kind::fine) {
      for (; done < granules; ++done) plan.mappings.push_back(Mapping{at + done * granule_, granule_, add_piece(granule_), 0, false});
    } else if (done < granules) {
      const PieceId id = add_piece(std::max((granules - done) * granule_, slab_bytes / granule_ * granule_));
      for (std::size_t offset = 0; done < granules; ++done, offset += granule_) {
        plan.mappings.push_back(Mapping{at + done * granule_, granule_, id, offset, false});
      }
    }
    return true;
  } catch (...) {  // bad_alloc
    plan = Plan{};
    return false;
  }
}

bool Backing::reserve_for(const Plan& plan) {
  try {
    mappings_.reserve(mappings_.size() + plan.mappings.size());
    // Records for the new pieces (not live until recorded), each slab's idle list with room for all
    // its granules: recording allocates nothing.
    for (std::size_t i = 0; i < plan.new_ids.size(); ++i) {
      const PieceId id = plan.new_ids[i];
      if (id >= pieces_.size()) pieces_.resize(id + 1);  // the plan's new ids follow each other
      if (plan.kind != Kind::laid_out) pieces_[id].idle.reserve(plan.new_pieces[i] / granule_);
    }
    return true;
  } catch (...) {
    return false;
  }
}

void Backing::abandon(const Plan& plan) noexcept {
  for (const PieceId id : plan.new_ids) {
    if (id < pieces_.size() && !pieces_[id].live &&
        std::find(free_ids_.begin(), free_ids_.end(), id) == free_ids_.end()) {
      try {
        free_ids_.push_back(id);
      } catch (...) {  // the record stays unused
      }
    }
  }
}

void Backing::commit_map(const Plan& plan, std::span<const std::uint64_t> handles) noexcept {
  for (std::size_t i = 0; i < plan.new_ids.size(); ++i) {
    const PieceId id = plan.new_ids[i];
    Piece& piece = pieces_[id];  // made by reserve_for
    piece.id = id;
    piece.size = plan.new_pieces[i];
    piece.handle = i < handles.size() ? handles[i] : 0;
    piece.live = true;
    piece.slab = plan.kind != Kind::laid_out;
    piece.mapped_granules = 0;
    piece.idle.clear();
    held_bytes_ += piece.size;
    if (const auto free = std::find(free_ids_.begin(), free_ids_.end(), id); free != free_ids_.end()) {
      free_ids_.erase(free);
    }
  }
  for (const Mapping& mapping : plan.mappings) {
    Piece& piece = pieces_[mapping.piece];
    mapped_bytes_ += mapping.size;
    if (!piece.slab) continue;
    ++piece.mapped_granules;
    const auto granule = static_cast<std::uint32_t>(mapping.offset / granule_);
    const auto found = std::find(piece.idle.rbegin(), piece.idle.rend(), granule);
    if (found != piece.idle.rend()) piece.idle.erase(std::next(found).base());
  }
  // A new slab's granules that nothing maps yet are idle (highest first, so the lowest go first).
  for (std::size_t i = 0; i < plan.new_ids.size() && plan.kind != Kind::laid_out; ++i) {
    Piece& piece = pieces_[plan.new_ids[i]];
    for (std::size_t g = piece.size / granule_; g > piece.mapped_granules; --g) {
      piece.idle.push_back(static_cast<std::uint32_t>(g - 1));  // room reserved
    }
  }
  const auto middle = mappings_.insert(mappings_.end(), plan.mappings.begin(), plan.mappings.end());
  std::inplace_merge(mappings_.begin(), middle, mappings_.end(),
                     [](const Mapping& a, const Mapping& b) { return a.base < b.base; });
}

std::vector<Backing::Mapping> Backing::mappings_from(std::uintptr_t at, std::size_t bytes) const {
  std::vector<Mapping> found;
  for (std::size_t index = index_of(at); index < mappings_.size(); ++index) {
    const Mapping& mapping = mappings_[index];
    const std::uintptr_t expected = found.empty() ? at : found.back().base + found.back().size;
    if (mapping.base != expected || mapping.size > at + bytes - mapping.base) break;
    found.push_back(mapping);
  }
  return found;
}

void Backing::unmap(std::span<const Mapping> unmapped, std::vector<Piece>& gone) noexcept {
  for (const Mapping& mapping : unmapped) {
    const std::size_t index = index_of(mapping.base);
    if (index == mappings_.size()) continue;
    mappings_.erase(mappings_.begin() + static_cast<std::ptrdiff_t>(index));
    if (mapping.borrowed) continue;  // the memory stays behind its lender
    mapped_bytes_ -= mapping.size;
    Piece& piece = pieces_[mapping.piece];
    if (piece.slab) {
      --piece.mapped_granules;
      piece.idle.push_back(static_cast<std::uint32_t>(mapping.offset / granule_));  // room: all its granules
      continue;
    }
    forget(mapping.piece, gone);
  }
}

std::size_t Backing::release_idle(std::vector<Piece>& gone) noexcept {
  std::size_t released = 0;
  for (PieceId id = 0; id < pieces_.size(); ++id) {
    if (!pieces_[id].live || !pieces_[id].slab || pieces_[id].mapped_granules > 0) continue;
    released += pieces_[id].size;
    forget(id, gone);
  }
  return released;
}

void Backing::forget(PieceId id, std::vector<Piece>& gone) noexcept {
  Piece& piece = pieces_[id];
  gone.push_back(std::move(piece));  // room reserved by the caller; the idle list moves, nothing allocated
  held_bytes_ -= piece.size;
  piece = Piece{};
  try {
    free_ids_.push_back(id);
  } catch (...) {  // the record stays unused
  }
}

Backing::Mapping Backing::plan_loan(std::uintptr_t from, std::uintptr_t at) const noexcept {
  const Mapping* lender = mapping_at(from);
  if (lender == nullptr || lender->borrowed || from % granule_ != 0) return Mapping{};
  return Mapping{at, granule_, lender->piece, lender->offset + (from - lender->base), true};
}

bool Backing::reserve_for_loan() {
  try {
    mappings_.reserve(mappings_.size() + 1);
    return true;
  } catch (...) {
    return false;
  }
}

void Backing::commit_loan(const Mapping& loan) noexcept {
  const auto position = std::lower_bound(mappings_.begin(), mappings_.end(), loan.base,
                                         [](const Mapping& mapping, std::uintptr_t at) { return mapping.base < at; });
  mappings_.insert(position, loan);  // room reserved
}

void Backing::clear() noexcept {
  pieces_.clear();
  free_ids_.clear();
  mappings_.clear();
  held_bytes_ = 0;
  mapped_bytes_ = 0;
}

bool Backing::validate() const noexcept {
  std::size_t held = 0;
  std::size_t mapped = 0;
  std::vector<std::size_t> covering(pieces_.size(), 0);
  for (std::size_t i = 0; i < mappings_.size(); ++i) {
    const Mapping& mapping = mappings_[i];
    if (mapping.size == 0 || mapping.base % granule_ != 0 || mapping.size % granule_ != 0) return false;
    if (i > 0 && mappings_[i - 1].base + mappings_[i - 1].size > mapping.base) return false;
    if (mapping.piece >= pieces_.size() || !pieces_[mapping.piece].live) return false;
    const Piece& piece = pieces_[mapping.piece];
    if (mapping.offset > piece.size || mapping.size > piece.size - mapping.offset) return false;
    if (mapping.borrowed) continue;
    mapped += mapping.size;
    covering[mapping.piece] += mapping.size / granule_;
  }
  for (PieceId id = 0; id < pieces_.size(); ++id) {
    const Piece& piece = pieces_[id];
    if (!piece.live) continue;
    held += piece.size;
    const std::size_t granules = piece.size / granule_;
    if (piece.slab ? covering[id] != piece.mapped_granules || piece.mapped_granules + piece.idle.size() != granules
                   : covering[id] != granules) {
      return false;
    }
  }
  return held == held_bytes_ && mapped == mapped_bytes_;
}

}  // namespace gpumem
