// The simulated driver's globals of modules and libraries: cuModuleGetGlobal (v1 and _v2),
// cuLibraryGetGlobal and cuLibraryGetManaged over PTX, cubin, fat-binary and linked images.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <elf.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace driver_test;
using runtime_test::FakeFatbin;

namespace {

// Globals of every shape the simulator reads; the comment, the extern declaration and the
// instruction that names `counter` declare nothing.
const char kPtx[] = R"(// .visible .global .u32 in_a_comment;
.version 8.0
.target sm_80
.address_size 64

.visible .global .align 4 .b8 table[64];
.visible .const .align 8 .f64 coeff = 0d3FF8000000000000;
.global .u32 counter = 5;
.visible .global .align 4 .u32 primes[4] = {2, 3, 5, 7};
.visible .global .attribute(.managed) .align 8 .u64 shared_total = 42;
.visible .const .align 4 .f32 scale[2] = {0.5, -2.0};
.extern .global .align 4 .u32 elsewhere;
.visible .global .align 16 .v4 .u32 quad[2];
.global .align 2 .s16 signed_values[] = {-1, 300};
/* .global .u32 in_a_block_comment; */

.visible .entry touch(.param .u64 p)
{
	.reg .b32 %r<2>;
	.global .u32 not_module_scope;
	ld.global.u32 %r1, [counter];
	ret;
}
)";

struct Global {
  CUdeviceptr address = 0;
  size_t size = 0;
};

Global module_global(CUmodule module, const char* name) {
  Global g;
  REQUIRE(cuModuleGetGlobal_v2(&g.address, &g.size, module, name) == CUDA_SUCCESS);
  return g;
}

template <typename T, std::size_t N>
std::vector<T> read(CUdeviceptr address) {
  std::vector<T> values(N);
  REQUIRE(cuMemcpyDtoH(values.data(), address, sizeof(T) * N) == CUDA_SUCCESS);
  return values;
}

size_t free_memory() {
  size_t free = 0, total = 0;
  REQUIRE(cuMemGetInfo(&free, &total) == CUDA_SUCCESS);
  return free;
}

// A minimal 64-bit ELF cubin: a zero-filled global in .nv.global (no file bytes) and an initialised
// constant in .nv.constant0, named by its symbol table.
std::string cubin_with_globals() {
  const std::string shstrtab = std::string("\0.shstrtab\0.strtab\0.symtab\0.nv.global\0.nv.constant0\0", 52);
  const std::string strtab = std::string("\0zeros\0limits\0", 14);
  const std::uint32_t limits[2] = {1000, 2000};
  std::vector<Elf64_Sym> symbols(3);
  symbols[1].st_name = 1;  // zeros
  symbols[1].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
  symbols[1].st_shndx = 4;
  symbols[1].st_size = 24;
  symbols[2].st_name = 7;  // limits
  symbols[2].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
  symbols[2].st_shndx = 5;
  symbols[2].st_size = sizeof limits;
  std::string body = shstrtab + strtab;
  const std::size_t symtab_at = sizeof(Elf64_Ehdr) + body.size();
  body.append(reinterpret_cast<const char*>(symbols.data()), symbols.size() * sizeof(Elf64_Sym));
  const std::size_t constants_at = sizeof(Elf64_Ehdr) + body.size();
  body.append(reinterpret_cast<const char*>(limits), sizeof limits);
  std::vector<Elf64_Shdr> sections(6);
  sections[1] = {1, SHT_STRTAB, 0, 0, sizeof(Elf64_Ehdr), shstrtab.size(), 0, 0, 1, 0};
  sections[2] = {11, SHT_STRTAB, 0, 0, sizeof(Elf64_Ehdr) + shstrtab.size(), strtab.size(), 0, 0, 1, 0};
  sections[3] = {19, SHT_SYMTAB, 0, 0, symtab_at, symbols.size() * sizeof(Elf64_Sym), 2, 1, 8, sizeof(Elf64_Sym)};
  sections[4] = {27, SHT_NOBITS, SHF_ALLOC | SHF_WRITE, 0, 0, 24, 0, 0, 8, 0};
  sections[5] = {38, SHT_PROGBITS, SHF_ALLOC, 0, constants_at, sizeof limits, 0, 0, 4, 0};
  Elf64_Ehdr header{};  // what a loader reads of it: the magic, the class and the section table
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = ELFCLASS64;
  header.e_shentsize = sizeof(Elf64_Shdr);
  header.e_shnum = static_cast<Elf64_Half>(sections.size());
  header.e_shstrndx = 1;
  header.e_shoff = sizeof header + body.size();
  std::string image(reinterpret_cast<const char*>(&header), sizeof header);
  image += body;
  image.append(reinterpret_cast<const char*>(sections.data()), sections.size() * sizeof(Elf64_Shdr));
  return image;
}

}  // namespace

TEST_CASE("a module's PTX globals have their declared sizes, own addresses and initial values",
          "[driver][modules][globals]") {
  primary_context();
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoadData(&module, kPtx) == CUDA_SUCCESS);

  // Each declaration's size: type width x vector width x extents (or the initialiser's length).
  const std::map<std::string, size_t> sizes = {{"table", 64}, {"coeff", 8},         {"counter", 4},
                                               {"primes", 16}, {"shared_total", 8}, {"scale", 8},
                                               {"quad", 32},   {"signed_values", 4}};
  std::map<std::string, Global> globals;
  std::set<CUdeviceptr> addresses;
  for (const auto& entry : sizes) {
    INFO(entry.first);
    globals[entry.first] = module_global(module, entry.first.c_str());
    CHECK(globals[entry.first].size == entry.second);
    CHECK(globals[entry.first].address % 256 == 0);
    addresses.insert(globals[entry.first].address);
  }
  CHECK(addresses.size() == sizes.size());
  const Global table = globals["table"], coeff = globals["coeff"], counter = globals["counter"];
  const Global primes = globals["primes"], total = globals["shared_total"], scale = globals["scale"];
  const Global quad = globals["quad"], signed_values = globals["signed_values"];

  CHECK(read<std::uint8_t, 64>(table.address) == std::vector<std::uint8_t>(64, 0));
  CHECK(read<double, 1>(coeff.address) == std::vector<double>{1.5});
  CHECK(read<std::uint32_t, 1>(counter.address) == std::vector<std::uint32_t>{5});
  CHECK(read<std::uint32_t, 4>(primes.address) == std::vector<std::uint32_t>{2, 3, 5, 7});
  CHECK(read<std::uint64_t, 1>(total.address) == std::vector<std::uint64_t>{42});
  CHECK(read<float, 2>(scale.address) == std::vector<float>{0.5f, -2.0f});
  CHECK(read<std::uint32_t, 8>(quad.address) == std::vector<std::uint32_t>(8, 0));
  CHECK(read<std::int16_t, 2>(signed_values.address) == std::vector<std::int16_t>{-1, 300});

  SECTION("writes persist, and every request answers the same memory") {
    const std::uint32_t value = 77;
    REQUIRE(cuMemcpyHtoD(counter.address, &value, sizeof value) == CUDA_SUCCESS);
    const Global again = module_global(module, "counter");
    CHECK(again.address == counter.address);
    CHECK(read<std::uint32_t, 1>(again.address) == std::vector<std::uint32_t>{77});
  }
  SECTION("one of dptr and bytes may be NULL, not both") {
    CUdeviceptr address = 0;
    size_t size = 0;
    CHECK(cuModuleGetGlobal_v2(&address, nullptr, module, "primes") == CUDA_SUCCESS);
    CHECK(address == primes.address);
    CHECK(cuModuleGetGlobal_v2(nullptr, &size, module, "primes") == CUDA_SUCCESS);
    CHECK(size == 16);
    CHECK(cuModuleGetGlobal_v2(nullptr, nullptr, module, "primes") == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuModuleGetGlobal_v2(&address, &size, module, nullptr) == CUDA_ERROR_INVALID_VALUE);
  }
  SECTION("names that are no global of the module are not found") {
    CUdeviceptr address = 0;
    size_t size = 0;
    for (const char* name : {"missing", "touch", "elsewhere", "in_a_comment", "in_a_block_comment", "not_module_scope",
                             "tabl", ""})
      CHECK(cuModuleGetGlobal_v2(&address, &size, module, name) == CUDA_ERROR_NOT_FOUND);
  }
  SECTION("the 32-bit form answers sizes; its pointers cannot reach the simulated memory") {
    // cuda.h declares the unversioned symbol only to the driver itself (CUdeviceptr_v1 is 32 bits).
    using GetGlobalV1 = CUresult (*)(unsigned int*, unsigned int*, CUmodule, const char*);
    const auto get_global_v1 = reinterpret_cast<GetGlobalV1>(dlsym(RTLD_DEFAULT, "cuModuleGetGlobal"));
    REQUIRE(get_global_v1 != nullptr);
    unsigned int size = 0;
    unsigned int address = 0;
    CHECK(get_global_v1(nullptr, &size, module, "coeff") == CUDA_SUCCESS);
    CHECK(size == 8);
    // Memory above 4 GiB (where the simulator's mappings normally lie) has no 32-bit address.
    const CUresult expected = coeff.address > 0xffffffffULL ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
    CHECK(get_global_v1(&address, &size, module, "coeff") == expected);
    if (expected == CUDA_SUCCESS) CHECK(address == coeff.address);
    CHECK(get_global_v1(&address, &size, module, "missing") == CUDA_ERROR_NOT_FOUND);
  }
  SECTION("a global's address is device memory of the module's context for pointer queries") {
    CUdeviceptr base = 0;
    size_t size = 0;
    REQUIRE(cuMemGetAddressRange(&base, &size, primes.address + 8) == CUDA_SUCCESS);
    CHECK(base == primes.address);
    CHECK(size == 16);
    CUcontext owner = nullptr;
    unsigned int memory_type = 0;
    int managed = -1;
    CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, primes.address) == CUDA_SUCCESS);
    CHECK(owner == primary_context());
    CHECK(cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, primes.address) == CUDA_SUCCESS);
    CHECK(memory_type == CU_MEMORYTYPE_DEVICE);
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, primes.address) == CUDA_SUCCESS);
    CHECK(managed == 0);
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, total.address) == CUDA_SUCCESS);
    CHECK(managed == 1);
    // Module memory is the module's to free.
    CHECK(cuMemFree(primes.address) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemGetAddressRange(&base, &size, primes.address) == CUDA_SUCCESS);
  }
  REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
}

TEST_CASE("unloading a module frees its globals' memory", "[driver][modules][globals]") {
  primary_context();
  const char big[] = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .global .align 8 .b8 big[67108864];\n";
  const size_t before = free_memory();
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoadData(&module, big) == CUDA_SUCCESS);
  CHECK(free_memory() == before);  // memory is given on the first request
  const Global g = module_global(module, "big");
  CHECK(g.size == 64 * kMiB);
  CHECK(free_memory() <= before - 64 * kMiB);
  const std::uint64_t last = 0x0123456789abcdefULL;
  REQUIRE(cuMemcpyHtoD(g.address + g.size - sizeof last, &last, sizeof last) == CUDA_SUCCESS);
  REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemGetAddressRange(&base, &size, g.address) == CUDA_ERROR_NOT_FOUND);
  CHECK(cuModuleGetGlobal_v2(&base, &size, module, "big") == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("a library's globals are per context; its managed globals are one for all",
          "[driver][modules][globals]") {
  CUcontext primary = primary_context();
  CUlibrary library = nullptr;
  REQUIRE(cuLibraryLoadData(&library, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  CUdeviceptr here = 0, managed_here = 0;
  size_t size = 0;
  REQUIRE(cuLibraryGetGlobal(&here, &size, library, "counter") == CUDA_SUCCESS);
  CHECK(size == 4);
  REQUIRE(cuLibraryGetManaged(&managed_here, &size, library, "shared_total") == CUDA_SUCCESS);
  CHECK(size == 8);
  const std::uint32_t value = 9;
  REQUIRE(cuMemcpyHtoD(here, &value, sizeof value) == CUDA_SUCCESS);
  // The library's module in this context holds the same memory.
  CUmodule module = nullptr;
  REQUIRE(cuLibraryGetModule(&module, library) == CUDA_SUCCESS);
  CHECK(module_global(module, "counter").address == here);

  CUcontext other = nullptr;
  REQUIRE(cuCtxCreate(&other, nullptr, 0, 0) == CUDA_SUCCESS);  // made current
  CUdeviceptr there = 0, managed_there = 0;
  REQUIRE(cuLibraryGetGlobal(&there, nullptr, library, "counter") == CUDA_SUCCESS);
  CHECK(there != here);
  CHECK(read<std::uint32_t, 1>(there) == std::vector<std::uint32_t>{5});  // its own copy, initialised
  CUcontext owner = nullptr;
  CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, there) == CUDA_SUCCESS);
  CHECK(owner == other);
  REQUIRE(cuLibraryGetManaged(&managed_there, nullptr, library, "shared_total") == CUDA_SUCCESS);
  CHECK(managed_there == managed_here);
  CHECK(cuLibraryGetGlobal(&managed_there, nullptr, library, "shared_total") == CUDA_SUCCESS);
  CHECK(managed_there == managed_here);
  CHECK(*reinterpret_cast<const std::uint64_t*>(managed_here) == 42);  // managed memory is host-accessible

  CHECK(cuLibraryGetManaged(&managed_there, nullptr, library, "counter") == CUDA_ERROR_NOT_FOUND);
  CHECK(cuLibraryGetGlobal(&there, nullptr, library, "missing") == CUDA_ERROR_NOT_FOUND);
  CHECK(cuLibraryGetGlobal(nullptr, nullptr, library, "counter") == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLibraryGetManaged(&there, nullptr, library, nullptr) == CUDA_ERROR_INVALID_VALUE);

  REQUIRE(cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  CHECK(read<std::uint32_t, 1>(here) == std::vector<std::uint32_t>{9});
  REQUIRE(cuLibraryUnload(library) == CUDA_SUCCESS);
  CUdeviceptr base = 0;
  for (CUdeviceptr gone : {here, there, managed_here})
    CHECK(cuMemGetAddressRange(&base, &size, gone) == CUDA_ERROR_NOT_FOUND);
  CHECK(cuLibraryGetGlobal(&base, &size, library, "counter") == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLibraryGetManaged(&base, &size, library, "shared_total") == CUDA_ERROR_INVALID_HANDLE);
  REQUIRE(cuCtxDestroy(other) == CUDA_SUCCESS);
  primary_context();
}

TEST_CASE("globals come from cubin symbol tables, fat binaries and linked images", "[driver][modules][globals]") {
  primary_context();
  SECTION("a cubin's .nv.global and .nv.constant objects") {
    const std::string cubin = cubin_with_globals();
    CUmodule module = nullptr;
    REQUIRE(cuModuleLoadData(&module, cubin.data()) == CUDA_SUCCESS);
    const Global zeros = module_global(module, "zeros");
    const Global limits = module_global(module, "limits");
    CHECK(zeros.size == 24);
    CHECK(limits.size == 8);
    CHECK(read<std::uint8_t, 24>(zeros.address) == std::vector<std::uint8_t>(24, 0));
    CHECK(read<std::uint32_t, 2>(limits.address) == std::vector<std::uint32_t>{1000, 2000});
    REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
  }
  SECTION("PTX inside a fat binary") {
    FakeFatbin fatbin(kPtx);
    CUmodule module = nullptr;
    REQUIRE(cuModuleLoadFatBinary(&module, &fatbin.wrapper) == CUDA_SUCCESS);
    CHECK(read<std::uint32_t, 4>(module_global(module, "primes").address) == std::vector<std::uint32_t>{2, 3, 5, 7});
    REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
  }
  SECTION("the image the linker made from PTX and a cubin") {
    const std::string cubin = cubin_with_globals();
    CUlinkState link = nullptr;
    REQUIRE(cuLinkCreate(0, nullptr, nullptr, &link) == CUDA_SUCCESS);
    REQUIRE(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kPtx), sizeof kPtx, "globals.ptx", 0, nullptr,
                          nullptr) == CUDA_SUCCESS);
    REQUIRE(cuLinkAddData(link, CU_JIT_INPUT_CUBIN, const_cast<char*>(cubin.data()), cubin.size(), "globals.cubin", 0,
                          nullptr, nullptr) == CUDA_SUCCESS);
    void* image = nullptr;
    size_t image_size = 0;
    REQUIRE(cuLinkComplete(link, &image, &image_size) == CUDA_SUCCESS);
    CUmodule module = nullptr;
    REQUIRE(cuModuleLoadData(&module, image) == CUDA_SUCCESS);
    REQUIRE(cuLinkDestroy(link) == CUDA_SUCCESS);
    CHECK(read<std::uint32_t, 1>(module_global(module, "counter").address) == std::vector<std::uint32_t>{5});
    CHECK(read<std::uint32_t, 2>(module_global(module, "limits").address) == std::vector<std::uint32_t>{1000, 2000});
    REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
  }
}

TEST_CASE("a context's destruction takes its modules' globals", "[driver][modules][globals]") {
  CUcontext primary = primary_context();
  CUcontext other = nullptr;
  REQUIRE(cuCtxCreate(&other, nullptr, 0, 0) == CUDA_SUCCESS);
  CUlibrary library = nullptr;
  REQUIRE(cuLibraryLoadData(&library, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  CUdeviceptr gone = 0;
  REQUIRE(cuLibraryGetGlobal(&gone, nullptr, library, "table") == CUDA_SUCCESS);
  REQUIRE(cuCtxDestroy(other) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemGetAddressRange(&base, &size, gone) == CUDA_ERROR_NOT_FOUND);
  CUdeviceptr here = 0;
  REQUIRE(cuLibraryGetGlobal(&here, &size, library, "table") == CUDA_SUCCESS);
  CHECK(size == 64);
  CHECK(cuMemGetAddressRange(&base, &size, here) == CUDA_SUCCESS);
  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
}
