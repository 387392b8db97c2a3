// The globals of modules and libraries (cuModuleGetGlobal, cuLibraryGetGlobal, cuLibraryGetManaged):
// the variables an image declares in global or constant memory, read from its PTX declarations or
// its cubin's symbol table, each given device memory of its size in the module's context on first
// request (managed memory for a `.managed` global), filled with the image's initial value, and
// freed when the module or library is unloaded.
#include "contexts.h"
#include "kernels.h"
#include "state.h"

#include <elf.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

using namespace cudasim;

namespace {

// --- PTX declarations ---

// The bytes of one scalar of a PTX type (.b8 ... .b128, .u/.s/.f of 8 to 64 bits, .f16x2, .bf16,
// .bf16x2); 0 for anything else.
std::size_t scalar_bytes(std::string_view type) {
  if (type == ".f16x2" || type == ".bf16x2") return 4;
  if (type == ".bf16") return 2;
  if (type == ".b128") return 16;
  if (type.size() < 3 || type[0] != '.' || std::string_view("bsuf").find(type[1]) == std::string_view::npos) return 0;
  const std::string_view bits = type.substr(2);
  if (bits == "8") return 1;
  if (bits == "16") return 2;
  if (bits == "32") return 4;
  if (bits == "64") return 8;
  return 0;
}

// The text with its comments blanked out (string literals kept whole).
std::string without_comments(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "//") == 0) {
      i = text.find('\n', i);
      if (i == std::string_view::npos) break;
    } else if (text.compare(i, 2, "/*") == 0) {
      const std::size_t end = text.find("*/", i + 2);
      if (end == std::string_view::npos) break;
      out += ' ';
      i = end + 2;
    } else if (text[i] == '"') {
      const std::size_t end = text.find('"', i + 1);
      const std::size_t stop = end == std::string_view::npos ? text.size() : end + 1;
      out.append(text.substr(i, stop - i));
      i = stop;
    } else {
      out += text[i++];
    }
  }
  return out;
}

// Whether the statement so far is a directive that ends at its line, not at a semicolon.
bool line_directive(const std::string& statement) {
  const std::size_t start = statement.find_first_not_of(' ');
  if (start == std::string::npos) return false;
  for (const char* name : {".version", ".target", ".address_size", ".file"})
    if (statement.compare(start, std::strlen(name), name) == 0) return true;
  return false;
}

// The module-scope statements of PTX text, each on one line: the bodies of functions, entries and
// sections are skipped; an initialiser's braces (after `=`) stay part of its statement.
std::vector<std::string> module_statements(const std::string& text) {
  std::vector<std::string> statements;
  std::string statement;
  int body = 0;         // nesting inside a body being skipped
  int initialiser = 0;  // nesting inside an initialiser's braces
  for (char c : text) {
    if (body > 0) {
      body += c == '{' ? 1 : c == '}' ? -1 : 0;
      continue;
    }
    if (c == '{') {
      if (statement.find('=') != std::string::npos) {
        ++initialiser;
        statement += c;
      } else {
        body = 1;
        statement.clear();
      }
    } else if (c == '}') {
      if (initialiser > 0) {
        --initialiser;
        statement += c;
      }
    } else if (c == ';' && initialiser == 0) {
      statements.push_back(std::move(statement));
      statement.clear();
    } else if (c == '\n' && line_directive(statement)) {
      statement.clear();
    } else {
      statement += std::isspace(static_cast<unsigned char>(c)) ? ' ' : c;
    }
  }
  return statements;
}

// The initialiser's values in order, braces of nested lists dropped.
std::vector<std::string> initial_values(std::string text) {
  std::replace(text.begin(), text.end(), '{', ',');
  std::replace(text.begin(), text.end(), '}', ',');
  std::vector<std::string> values;
  std::istringstream in(text);
  for (std::string value; std::getline(in, value, ',');) {
    std::erase_if(value, [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; });
    if (!value.empty()) values.push_back(value);
  }
  return values;
}

// The little-endian bits of one initial value of `type`: an integer (decimal, 0x hex, octal, an
// optional U suffix), a float as 0fXXXXXXXX / 0dXXXXXXXXXXXXXXXX bits, or a decimal .f32 / .f64.
// Nullopt for anything else (addresses of variables, expressions).
std::optional<std::uint64_t> value_bits(std::string value, std::string_view type) {
  auto whole = [](const std::string& text, auto parse) -> std::optional<decltype(parse(nullptr, nullptr))> {
    char* end = nullptr;
    errno = 0;
    const auto parsed = parse(text.c_str(), &end);
    if (text.empty() || errno != 0 || end != text.c_str() + text.size()) return std::nullopt;
    return parsed;
  };
  auto hex = [](const char* s, char** e) { return std::strtoull(s, e, 16); };
  const bool is_float = type == ".f32" || type == ".f64" || type == ".f16";
  if (value.size() > 2 && value[0] == '0' && (value[1] == 'f' || value[1] == 'F' || value[1] == 'd' || value[1] == 'D'))
    return whole(value.substr(2), hex);
  if (is_float) {
    const auto number = whole(value, [](const char* s, char** e) { return std::strtod(s, e); });
    if (!number || type == ".f16") return std::nullopt;
    std::uint64_t bits = 0;
    if (type == ".f64") {
      std::memcpy(&bits, &*number, sizeof(double));
    } else {
      const auto narrow = static_cast<float>(*number);
      std::memcpy(&bits, &narrow, sizeof narrow);
    }
    return bits;
  }
  if (!value.empty() && (value.back() == 'U' || value.back() == 'u')) value.pop_back();
  if (!value.empty() && value[0] == '-') {
    const auto number = whole(value, [](const char* s, char** e) { return std::strtoll(s, e, 0); });
    if (!number) return std::nullopt;
    return static_cast<std::uint64_t>(*number);
  }
  return whole(value, [](const char* s, char** e) { return std::strtoull(s, e, 0); });
}

// One name of a declaration with its array extents (`table[4][8]`; 0 for `[]`).
struct Declarator {
  std::string name;
  std::vector<std::size_t> extents;
};

std::optional<Declarator> declarator(std::string_view text) {
  Declarator d;
  std::size_t p = 0;
  while (p < text.size() && identifier_char(text[p])) ++p;
  d.name = std::string(text.substr(0, p));
  if (d.name.empty()) return std::nullopt;
  while (p < text.size() && text[p] == '[') {
    const std::size_t close = text.find(']', p);
    if (close == std::string_view::npos) return std::nullopt;
    const std::string digits(text.substr(p + 1, close - p - 1));
    char* end = nullptr;
    const unsigned long long extent = digits.empty() ? 0 : std::strtoull(digits.c_str(), &end, 0);
    if (!digits.empty() && (end != digits.c_str() + digits.size() || extent == 0)) return std::nullopt;
    d.extents.push_back(extent);
    p = close + 1;
  }
  return d;
}

// Adds the globals one module-scope statement defines: `[.visible|.weak|.common] (.global|.const)
// [.attribute(.managed)] [.align N] [.vN] .type name[extents]... [= initialiser]`, or a list of
// names without initialiser. `.extern` declarations define nothing.
void add_ptx_declaration(const std::string& statement, std::vector<GlobalDecl>& out) {
  const std::size_t equals = statement.find('=');
  const std::string declaration = statement.substr(0, equals);
  std::istringstream words(declaration);
  bool space = false, external = false, managed = false;
  std::size_t align = 0, vector = 1, scalar = 0;
  std::string type, word;
  while (scalar == 0 && words >> word) {
    if (word == ".global" || word == ".const") space = true;
    else if (word == ".extern") external = true;
    else if (word.find(".managed") != std::string::npos) managed = true;
    else if (word == ".align") words >> align;
    else if (word == ".v2" || word == ".v4" || word == ".v8") vector = static_cast<std::size_t>(word[2] - '0');
    else if ((scalar = scalar_bytes(word)) > 0) type = word;
  }
  if (!space || external || scalar == 0) return;
  std::string names;
  for (std::string rest; words >> rest;) names += rest;
  std::vector<Declarator> declarators;
  std::istringstream list(names);
  for (std::string item; std::getline(list, item, ',');) {
    std::optional<Declarator> d = declarator(item);
    if (!d) return;  // not a declaration this parser reads
    declarators.push_back(std::move(*d));
  }
  const std::vector<std::string> values =
      equals == std::string::npos || declarators.size() != 1 ? std::vector<std::string>{}
                                                             : initial_values(statement.substr(equals + 1));
  const std::size_t element = scalar * vector;
  for (const Declarator& d : declarators) {
    // Elements: the product of the extents; an unsized first extent holds what the initialiser gives.
    std::size_t elements = 1, known = 1;
    bool unsized = false;
    for (std::size_t extent : d.extents) {
      if (extent == 0) unsized = true;
      else if (__builtin_mul_overflow(known, extent, &known)) return;
    }
    if (unsized) {
      const std::size_t per_row = known * vector;
      elements = (values.size() + per_row - 1) / per_row * known;
    } else {
      elements = known;
    }
    GlobalDecl decl{d.name, 0, align > 0 ? align : element, managed, {}};
    if (elements == 0 || __builtin_mul_overflow(elements, element, &decl.size)) continue;
    std::string initial(decl.size, '\0');
    bool any = false;
    for (std::size_t i = 0; i < values.size() && (i + 1) * scalar <= decl.size; ++i) {
      const std::optional<std::uint64_t> bits = value_bits(values[i], type);
      if (!bits || *bits == 0) continue;  // an unreadable value stays zero
      std::memcpy(initial.data() + i * scalar, &*bits, std::min(scalar, sizeof *bits));
      any = true;
    }
    if (any) decl.initial = std::move(initial);
    out.push_back(std::move(decl));
  }
}

void add_ptx_globals(std::string_view text, std::vector<GlobalDecl>& out) {
  for (const std::string& statement : module_statements(without_comments(text))) add_ptx_declaration(statement, out);
}

// --- cubin symbol tables ---

template <typename T>
T read_struct(std::string_view bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

// The NUL-terminated string at `offset` of a string table; empty when it runs out of the table.
std::string_view table_string(std::string_view table, std::size_t offset) {
  if (offset >= table.size()) return {};
  const std::size_t end = table.find('\0', offset);
  return end == std::string_view::npos ? std::string_view{} : table.substr(offset, end - offset);
}

// Adds the object symbols of a 64-bit ELF cubin's .nv.global* and .nv.constant* sections, with the
// bytes their section holds for them (none in .nv.global, which takes no space in the file).
void add_elf_globals(std::string_view image, std::vector<GlobalDecl>& out) {
  if (image.size() < sizeof(Elf64_Ehdr) || image.compare(0, SELFMAG, ELFMAG) != 0 || image[EI_CLASS] != ELFCLASS64)
    return;
  const auto header = read_struct<Elf64_Ehdr>(image, 0);
  if (header.e_shentsize != sizeof(Elf64_Shdr) || header.e_shoff > image.size() ||
      std::uint64_t{header.e_shnum} * sizeof(Elf64_Shdr) > image.size() - header.e_shoff)
    return;
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  for (std::size_t i = 0; i < sections.size(); ++i)
    sections[i] = read_struct<Elf64_Shdr>(image, header.e_shoff + i * sizeof(Elf64_Shdr));
  auto contents = [&image](const Elf64_Shdr& s) -> std::string_view {
    if (s.sh_type == SHT_NOBITS || s.sh_offset > image.size() || s.sh_size > image.size() - s.sh_offset) return {};
    return image.substr(s.sh_offset, s.sh_size);
  };
  const std::string_view section_names =
      header.e_shstrndx < sections.size() ? contents(sections[header.e_shstrndx]) : std::string_view{};
  for (const Elf64_Shdr& table : sections) {
    if (table.sh_type != SHT_SYMTAB || table.sh_entsize != sizeof(Elf64_Sym) || table.sh_link >= sections.size())
      continue;
    const std::string_view symbols = contents(table);
    const std::string_view names = contents(sections[table.sh_link]);
    for (std::size_t at = 0; at + sizeof(Elf64_Sym) <= symbols.size(); at += sizeof(Elf64_Sym)) {
      const auto symbol = read_struct<Elf64_Sym>(symbols, at);
      if (ELF64_ST_TYPE(symbol.st_info) != STT_OBJECT || symbol.st_size == 0 || symbol.st_shndx == SHN_UNDEF ||
          symbol.st_shndx >= sections.size())
        continue;
      const Elf64_Shdr& home = sections[symbol.st_shndx];
      const std::string_view section = table_string(section_names, home.sh_name);
      if (!section.starts_with(".nv.global") && !section.starts_with(".nv.constant")) continue;
      const std::string_view name = table_string(names, symbol.st_name);
      if (name.empty()) continue;
      GlobalDecl decl{std::string(name), symbol.st_size, std::max<std::size_t>(1, home.sh_addralign), false, {}};
      const std::string_view data = contents(home);
      if (symbol.st_value <= data.size() && symbol.st_size <= data.size() - symbol.st_value)
        decl.initial = std::string(data.substr(symbol.st_value, symbol.st_size));
      out.push_back(std::move(decl));
    }
  }
}

// --- the memory of globals ---

// The declaration of `name`; null when the image declares none.
const GlobalDecl* declared(const GlobalDecls& globals, const char* name) {
  if (!globals) return nullptr;
  auto it = std::find_if(globals->begin(), globals->end(), [name](const GlobalDecl& d) { return d.name == name; });
  return it == globals->end() ? nullptr : &*it;
}

bool live(State& st, const GlobalStorage& storage) {
  auto it = st.allocations.find(storage.address);
  return it != st.allocations.end() && it->second.buffer_id == storage.buffer_id;
}

// The device address of `decl` in `storage`: memory in `ctx` (null: no current context, which only
// a first request needs) allocated and filled on first request. Needs State::mu.
CUresult global_address(State& st, CUctx_st* ctx, GlobalStorages& storage, const GlobalDecl& decl,
                        CUdeviceptr* address) {
  if (auto it = storage.find(decl.name); it != storage.end() && live(st, it->second)) {
    *address = it->second.address;
    return CUDA_SUCCESS;
  }
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  CUdeviceptr base = 0;
  const CUresult rc = decl.managed ? allocate_managed_memory(st, ctx, decl.size, &base)
                                   : allocate_device_memory(st, ctx, decl.size, &base);
  if (rc != CUDA_SUCCESS) return rc;
  Allocation& allocation = st.allocations.at(base);
  allocation.module_global = true;
  if (!decl.initial.empty()) std::memcpy(reinterpret_cast<void*>(base), decl.initial.data(), decl.size);
  storage[decl.name] = GlobalStorage{base, allocation.buffer_id};
  *address = base;
  return CUDA_SUCCESS;
}

CUresult answer(CUdeviceptr address, std::size_t size, CUdeviceptr* dptr, size_t* bytes) {
  if (dptr != nullptr) *dptr = address;
  if (bytes != nullptr) *bytes = size;
  return CUDA_SUCCESS;
}

// cuModuleGetGlobal_v2. As documented, one of dptr and bytes (not both) may be NULL.
CUresult module_global(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if ((dptr == nullptr && bytes == nullptr) || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!kernels(l.st).modules.contains(hmod)) return CUDA_ERROR_INVALID_HANDLE;
  const GlobalDecl* decl = declared(hmod->globals, name);
  if (decl == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUdeviceptr address = 0;
  if (CUresult rc = global_address(l.st, hmod->ctx, hmod->storage, *decl, &address); rc != CUDA_SUCCESS) return rc;
  return answer(address, decl->size, dptr, bytes);
}

// cuLibraryGetGlobal (`managed_only` false) and cuLibraryGetManaged: an ordinary global in the
// library's module of the current context, a managed one once for the library (in the context
// current at the first request), as documented ("shared across devices").
CUresult library_global(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name, bool managed_only) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(l.st);
  if ((dptr == nullptr && bytes == nullptr) || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ks.libraries.contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  const GlobalDecl* decl = declared(library->globals, name);
  if (decl == nullptr || (managed_only && !decl->managed)) return CUDA_ERROR_NOT_FOUND;
  CUctx_st* ctx = nullptr;
  const CUresult current = current_context(l.st, &ctx);
  if (current != CUDA_SUCCESS) ctx = nullptr;
  if (current != CUDA_SUCCESS && !decl->managed) return current;
  GlobalStorages& storage = decl->managed ? library->managed : library_module(ks, library, ctx)->storage;
  CUdeviceptr address = 0;
  if (CUresult rc = global_address(l.st, ctx, storage, *decl, &address); rc != CUDA_SUCCESS) return rc;
  return answer(address, decl->size, dptr, bytes);
}

}  // namespace

namespace cudasim {

GlobalDecls image_globals(const std::string& image) {
  std::vector<GlobalDecl> found;
  const std::string_view bytes(image);
  add_elf_globals(bytes, found);
  // Cubins held inside: a fat binary's members, a linked image's inputs.
  const std::string_view elf_magic(ELFMAG, SELFMAG);
  for (std::size_t at = bytes.find(elf_magic, 1); at != std::string_view::npos; at = bytes.find(elf_magic, at + 1))
    add_elf_globals(bytes.substr(at), found);
  // PTX texts, whole or held inside: each from its `.version` line's NUL-delimited text.
  for (std::size_t at = bytes.find(".version"); at != std::string_view::npos;) {
    const std::size_t before = bytes.rfind('\0', at);
    const std::size_t start = before == std::string_view::npos ? 0 : before + 1;
    std::size_t end = bytes.find('\0', at);
    if (end == std::string_view::npos) end = bytes.size();
    add_ptx_globals(bytes.substr(start, end - start), found);
    at = bytes.find(".version", end);
  }
  auto globals = std::make_shared<std::vector<GlobalDecl>>();
  for (GlobalDecl& decl : found) {
    const std::string& name = decl.name;
    if (std::none_of(globals->begin(), globals->end(), [&name](const GlobalDecl& d) { return d.name == name; }))
      globals->push_back(std::move(decl));
  }
  return globals;
}

void free_globals(State& st, GlobalStorages& storage) {
  for (const auto& entry : storage)
    if (live(st, entry.second)) release_allocation(st, entry.second.address);
  storage.clear();
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  return module_global(dptr, bytes, hmod, name);
}

// The CUDA 2.x ABI: 32-bit device pointers and sizes. The simulated device's memory normally lies
// above 4 GiB, where no 32-bit pointer reaches: such an address (or size) is
// CUDA_ERROR_NOT_SUPPORTED; a size alone, when dptr is NULL and it fits, is answered.
CUDASIM_EXPORT CUresult cuModuleGetGlobal(CUdeviceptr_v1* dptr, unsigned int* bytes, CUmodule hmod, const char* name) {
  CUdeviceptr address = 0;
  size_t size = 0;
  if (CUresult rc = module_global(dptr != nullptr ? &address : nullptr, bytes != nullptr ? &size : nullptr, hmod, name);
      rc != CUDA_SUCCESS)
    return rc;
  constexpr std::uint64_t kMost = std::numeric_limits<unsigned int>::max();
  if (address > kMost || size > kMost) return CUDA_ERROR_NOT_SUPPORTED;
  if (dptr != nullptr) *dptr = static_cast<CUdeviceptr_v1>(address);
  if (bytes != nullptr) *bytes = static_cast<unsigned int>(size);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  return library_global(dptr, bytes, library, name, false);
}

CUDASIM_EXPORT CUresult cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  return library_global(dptr, bytes, library, name, true);
}
