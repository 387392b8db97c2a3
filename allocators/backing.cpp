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
      slab_bytes_(std::max(granule, slab_bytes / granule * granule)) {
  idle_heads_.fill(kNoPiece);
}

Backing::Mapping Backing::mapping_of(std::size_t slot) const noexcept {
  const Slot& at = slots_[slot];
  const std::uintptr_t address = range_base_ + slot * granule_;
  const Piece& piece = pieces_[at.piece];
  const std::size_t offset = std::size_t{at.granule} * granule_;
  if (at.borrowed || piece.slab) return Mapping{address, granule_, at.piece, offset, at.borrowed};
  return Mapping{address - offset, piece.size, at.piece, 0, false};  // a laid-out piece, mapped whole
}

std::optional<Backing::Mapping> Backing::mapping_at(std::uintptr_t address) const noexcept {
  if (address < range_base_) return std::nullopt;
  const std::size_t slot = slot_of(address);
  if (slot >= slots_.size() || slots_[slot].piece == kNoPiece) return std::nullopt;
  return mapping_of(slot);
}

std::vector<Backing::Mapping> Backing::mappings() const {
  std::vector<Mapping> all;
  for (std::size_t slot = 0; slot < slots_.size();) {
    if (slots_[slot].piece == kNoPiece) {
      ++slot;
      continue;
    }
    all.push_back(mapping_of(slot));
    slot = slot_of(all.back().base + all.back().size);
  }
  return all;
}

void Backing::set_slots(const Mapping& mapping, Slot value) noexcept {
  const std::size_t first = slot_of(mapping.base);
  const std::uint32_t offset = static_cast<std::uint32_t>(mapping.offset / granule_);
  for (std::size_t i = 0; i < mapping.size / granule_; ++i) {
    slots_[first + i] = value.piece == kNoPiece ? Slot{} : Slot{value.piece, static_cast<std::uint32_t>(offset + i), value.borrowed};
  }
}

void Backing::unlink_idle(PieceId id) noexcept {
  Piece& piece = pieces_[id];
  if (piece.idle_prev != kNoPiece) {
    pieces_[piece.idle_prev].idle_next = piece.idle_next;
  } else {
    PieceId& head = idle_heads_[idle_list_of(piece.idle.size())];
    if (head != id) return;  // in no list
    head = piece.idle_next;
  }
  if (piece.idle_next != kNoPiece) pieces_[piece.idle_next].idle_prev = piece.idle_prev;
  piece.idle_prev = piece.idle_next = kNoPiece;
}

void Backing::link_idle(PieceId id) noexcept {
  Piece& piece = pieces_[id];
  if (!piece.live || !piece.slab || piece.idle.empty()) return;
  PieceId& head = idle_heads_[idle_list_of(piece.idle.size())];
  if (piece.idle_prev != kNoPiece || head == id) return;  // linked already
  piece.idle_prev = kNoPiece;
  piece.idle_next = head;
  if (head != kNoPiece) pieces_[head].idle_prev = id;
  head = id;
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
            std::min(bytes - done, piece_bytes_at(at + done - range_base_, granule_, largest_piece_.load(std::memory_order_relaxed)));
        plan.mappings.push_back(Mapping{at + done, size, add_piece(size), 0, false});
        done += size;
      }
      return true;
    }
    const std::size_t granules = bytes / granule_;
    plan.mappings.reserve(granules);
    // Idle slab granules first, from the slabs with the fewest idle ones: a slab mostly idle is left
    // to empty, so that its memory can go back.
    std::size_t done = 0;
    for (std::size_t list = 1; list < kIdleLists && done < granules; ++list) {
      for (PieceId id = idle_heads_[list]; id != kNoPiece && done < granules; id = pieces_[id].idle_next) {
        const std::vector<std::uint32_t>& idle = pieces_[id].idle;
        for (std::size_t k = idle.size(); k > 0 && done < granules; --k, ++done) {
          plan.mappings.push_back(Mapping{at + done * granule_, granule_, id, std::size_t{idle[k - 1]} * granule_, false});
        }
      }
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
    std::size_t slots = slots_.size();
    for (const Mapping& mapping : plan.mappings) slots = std::max(slots, slot_of(mapping.base + mapping.size));
    if (slots > slots_.size()) slots_.resize(slots);
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
  for (const Mapping& mapping : plan.mappings) {  // taken idle granules change their slab's list
    if (mapping.piece < pieces_.size() && pieces_[mapping.piece].live) unlink_idle(mapping.piece);
  }
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
    piece.loans = 0;
    piece.idle_prev = piece.idle_next = kNoPiece;
    held_bytes_ += piece.size;
    if (const auto free = std::find(free_ids_.begin(), free_ids_.end(), id); free != free_ids_.end()) {
      free_ids_.erase(free);
    }
  }
  for (const Mapping& mapping : plan.mappings) {
    Piece& piece = pieces_[mapping.piece];
    mapped_bytes_ += mapping.size;
    set_slots(mapping, Slot{mapping.piece, 0, false});
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
  for (const Mapping& mapping : plan.mappings) link_idle(mapping.piece);  // each once: linking again is a no-op
  for (const PieceId id : plan.new_ids) link_idle(id);
}

std::vector<Backing::Mapping> Backing::mappings_from(std::uintptr_t at, std::size_t bytes) const {
  std::vector<Mapping> found;
  for (std::uintptr_t next = at; next - at < bytes;) {
    const std::optional<Mapping> mapping = mapping_at(next);
    if (!mapping || mapping->base != next || mapping->size > at + bytes - next) break;
    found.push_back(*mapping);
    next += mapping->size;
  }
  return found;
}

bool Backing::strands_a_loan(std::span<const Mapping> unmapped) const noexcept {
  for (const Mapping& lender : unmapped) {
    if (lender.borrowed || lender.piece >= pieces_.size() || pieces_[lender.piece].loans == 0) continue;
    std::size_t loans_in = 0;
    for (const Mapping& loan : unmapped) loans_in += loan.borrowed && loan.piece == lender.piece ? 1 : 0;
    if (loans_in < pieces_[lender.piece].loans) return true;
  }
  return false;
}

void Backing::unmap(std::span<const Mapping> unmapped, std::vector<Piece>& gone) noexcept {
  for (const Mapping& mapping : unmapped) {
    const std::optional<Mapping> recorded = mapping_at(mapping.base);
    if (!recorded || recorded->base != mapping.base || recorded->piece != mapping.piece) continue;
    set_slots(*recorded, Slot{});
    Piece& piece = pieces_[mapping.piece];
    if (recorded->borrowed) {  // the memory stays behind its lender
      --piece.loans;
      continue;
    }
    mapped_bytes_ -= recorded->size;
    if (piece.slab) {
      unlink_idle(mapping.piece);
      --piece.mapped_granules;
      piece.idle.push_back(static_cast<std::uint32_t>(recorded->offset / granule_));  // room: all its granules
      link_idle(mapping.piece);
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
  unlink_idle(id);
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
  const std::optional<Mapping> lender = mapping_at(from);
  if (!lender || lender->borrowed || from % granule_ != 0) return Mapping{};
  return Mapping{at, granule_, lender->piece, lender->offset + (from - lender->base), true};
}

bool Backing::reserve_for_loan(const Mapping& loan) {
  if (loan.base < range_base_) return false;
  try {
    if (slot_of(loan.base) >= slots_.size()) slots_.resize(slot_of(loan.base) + 1);
    return true;
  } catch (...) {
    return false;
  }
}

void Backing::commit_loan(const Mapping& loan) noexcept {
  set_slots(loan, Slot{loan.piece, 0, true});  // room reserved
  ++pieces_[loan.piece].loans;
}

void Backing::clear() noexcept {
  // Their memory too: a retired arena's source lives on, empty, while its context's pointers may
  // still be asked about.
  std::vector<Piece>().swap(pieces_);
  std::vector<PieceId>().swap(free_ids_);
  std::vector<Slot>().swap(slots_);
  idle_heads_.fill(kNoPiece);
  held_bytes_ = 0;
  mapped_bytes_ = 0;
}

bool Backing::validate() const noexcept {
  std::size_t held = 0;
  std::size_t mapped = 0;
  std::vector<std::size_t> covering(pieces_.size(), 0);
  std::vector<std::size_t> loans(pieces_.size(), 0);
  for (std::size_t slot = 0; slot < slots_.size(); ++slot) {
    const Slot& at = slots_[slot];
    if (at.piece == kNoPiece) continue;
    if (at.piece >= pieces_.size() || !pieces_[at.piece].live) return false;
    const Piece& piece = pieces_[at.piece];
    if (std::size_t{at.granule} >= piece.size / granule_) return false;
    const Mapping mapping = mapping_of(slot);
    // A laid-out piece's granules lie in order from its mapping's base, all of them in the slots.
    if (mapping.base < range_base_ || slot_of(mapping.base + mapping.size) > slots_.size()) return false;
    if (!mapping.borrowed && !piece.slab && mapping.base + std::size_t{at.granule} * granule_ != range_base_ + slot * granule_) {
      return false;
    }
    if (mapping.borrowed) {
      if (piece.slab) return false;
      ++loans[at.piece];
      continue;
    }
    mapped += granule_;
    ++covering[at.piece];
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
    if (loans[id] != piece.loans) return false;
  }
  // The idle lists: exactly the live slabs with idle granules, each in the list of its count.
  std::size_t listed = 0;
  for (std::size_t list = 0; list < kIdleLists; ++list) {
    PieceId before = kNoPiece;
    for (PieceId id = idle_heads_[list]; id != kNoPiece; before = id, id = pieces_[id].idle_next) {
      if (id >= pieces_.size() || ++listed > pieces_.size()) return false;
      const Piece& piece = pieces_[id];
      if (!piece.live || !piece.slab || piece.idle.empty() || idle_list_of(piece.idle.size()) != list ||
          piece.idle_prev != before) {
        return false;
      }
    }
  }
  std::size_t idle_slabs = 0;
  for (const Piece& piece : pieces_) idle_slabs += piece.live && piece.slab && !piece.idle.empty() ? 1 : 0;
  return listed == idle_slabs && held == held_bytes_ && mapped == mapped_bytes_;
}

}  // namespace gpumem
