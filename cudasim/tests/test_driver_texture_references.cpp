// The simulated driver's deprecated texture and surface references: a module's `.texref` and
// `.surfref` declarations found by name (one handle per module and name, stale after unload),
// cuTexRefCreate/Destroy, every setting set and read back, the bindings (linear, pitched 2D,
// arrays, mipmapped arrays) with their documented checks, cuSurfRefSetArray and cuParamSetTexRef.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>

using namespace driver_test;

// The deprecated references are still exported by the driver: tested as such.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

const char kPtx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".global .texref image_tex;\n"
    ".visible .global .texref  pitched_tex;\n"
    ".global .surfref out_surf;\n"
    ".param .texref not_a_global;\n"
    ".visible .entry sample(.param .u64 out)\n{\n\tret;\n}\n";

CUmodule load_module() {
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoadData(&module, kPtx) == CUDA_SUCCESS);
  return module;
}

CUtexref module_texref(CUmodule module, const char* name = "image_tex") {
  CUtexref texref = nullptr;
  REQUIRE(cuModuleGetTexRef(&texref, module, name) == CUDA_SUCCESS);
  return texref;
}

// A 64 x `height` array descriptor.
CUDA_ARRAY3D_DESCRIPTOR descriptor(size_t height, CUarray_format format, unsigned channels, unsigned flags = 0) {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = 64;
  desc.Height = height;
  desc.Format = format;
  desc.NumChannels = channels;
  desc.Flags = flags;
  return desc;
}

CUarray make_array(unsigned flags, CUarray_format format = CU_AD_FORMAT_UNSIGNED_INT16, unsigned channels = 2) {
  const CUDA_ARRAY3D_DESCRIPTOR desc = descriptor(16, format, channels, flags);
  CUarray array = nullptr;
  REQUIRE(cuArray3DCreate(&array, &desc) == CUDA_SUCCESS);
  return array;
}

CUDA_ARRAY_DESCRIPTOR pitched(size_t width, size_t height, CUarray_format format = CU_AD_FORMAT_FLOAT,
                              unsigned channels = 1) {
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = width;
  desc.Height = height;
  desc.Format = format;
  desc.NumChannels = channels;
  return desc;
}

int attribute(CUdevice_attribute which) {
  int value = 0;
  REQUIRE(cuDeviceGetAttribute(&value, which, 0) == CUDA_SUCCESS);
  return value;
}

}  // namespace

TEST_CASE("a module's texture and surface references are found by their PTX declarations", "[driver][texref]") {
  primary_context();
  CUmodule module = load_module();
  CUtexref image = module_texref(module);
  CHECK(image != nullptr);
  CHECK(module_texref(module) == image);  // the same handle on every call
  CUtexref pitched_ref = module_texref(module, "pitched_tex");  // `.visible`, two spaces
  CHECK(pitched_ref != image);
  CUsurfref surface = nullptr;
  CHECK(cuModuleGetSurfRef(&surface, module, "out_surf") == CUDA_SUCCESS);
  CHECK(surface != nullptr);
  CUsurfref again = nullptr;
  CHECK(cuModuleGetSurfRef(&again, module, "out_surf") == CUDA_SUCCESS);
  CHECK(again == surface);

  CUtexref missing = nullptr;
  CHECK(cuModuleGetTexRef(&missing, module, "no_such_tex") == CUDA_ERROR_NOT_FOUND);
  CHECK(cuModuleGetTexRef(&missing, module, "out_surf") == CUDA_ERROR_NOT_FOUND);      // a surface, not a texture
  CHECK(cuModuleGetTexRef(&missing, module, "image") == CUDA_ERROR_NOT_FOUND);         // a prefix of a name
  CHECK(cuModuleGetTexRef(&missing, module, "not_a_global") == CUDA_ERROR_NOT_FOUND);  // a parameter
  CHECK(cuModuleGetTexRef(&missing, module, "sample") == CUDA_ERROR_NOT_FOUND);        // a kernel
  CHECK(cuModuleGetTexRef(&missing, module, "") == CUDA_ERROR_NOT_FOUND);
  CUsurfref no_surface = nullptr;
  CHECK(cuModuleGetSurfRef(&no_surface, module, "image_tex") == CUDA_ERROR_NOT_FOUND);
  CHECK(cuModuleGetTexRef(nullptr, module, "image_tex") == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuModuleGetTexRef(&missing, module, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuModuleGetSurfRef(nullptr, module, "out_surf") == CUDA_ERROR_INVALID_VALUE);

  // A second load of the same image has references of its own.
  CUmodule other = load_module();
  CUtexref other_image = module_texref(other);
  CHECK(other_image != image);

  // Unloading the module ends its references; the other module's stay.
  REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
  unsigned flags = 0;
  CHECK(cuTexRefGetFlags(&flags, image) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefSetFilterMode(image, CU_TR_FILTER_MODE_LINEAR) == CUDA_ERROR_INVALID_VALUE);
  CUarray array = nullptr;
  CHECK(cuSurfRefGetArray(&array, surface) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuModuleGetTexRef(&missing, module, "image_tex") == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuModuleGetSurfRef(&no_surface, module, "out_surf") == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuTexRefDestroy(image) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetFlags(&flags, other_image) == CUDA_SUCCESS);
  REQUIRE(cuModuleUnload(other) == CUDA_SUCCESS);
  CHECK(cuTexRefGetFlags(&flags, other_image) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("every texture reference setting is checked, kept and read back", "[driver][texref]") {
  primary_context();
  CUmodule module = load_module();
  CUtexref texref = module_texref(module);

  // Starting values: one float channel, clamped point sampling, no flags.
  CUarray_format format = CU_AD_FORMAT_UNSIGNED_INT8;
  int channels = 0;
  CHECK(cuTexRefGetFormat(&format, &channels, texref) == CUDA_SUCCESS);
  CHECK(format == CU_AD_FORMAT_FLOAT);
  CHECK(channels == 1);
  CUaddress_mode mode = CU_TR_ADDRESS_MODE_WRAP;
  CHECK(cuTexRefGetAddressMode(&mode, texref, 0) == CUDA_SUCCESS);
  CHECK(mode == CU_TR_ADDRESS_MODE_CLAMP);

  CHECK(cuTexRefSetFormat(texref, CU_AD_FORMAT_SIGNED_INT16, 4) == CUDA_SUCCESS);
  CHECK(cuTexRefGetFormat(&format, &channels, texref) == CUDA_SUCCESS);
  CHECK(format == CU_AD_FORMAT_SIGNED_INT16);
  CHECK(channels == 4);
  CHECK(cuTexRefGetFormat(nullptr, &channels, texref) == CUDA_SUCCESS);  // either may be NULL
  CHECK(cuTexRefGetFormat(&format, nullptr, texref) == CUDA_SUCCESS);
  CHECK(cuTexRefSetFormat(texref, CU_AD_FORMAT_FLOAT, 3) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefSetFormat(texref, static_cast<CUarray_format>(0x7777), 1) == CUDA_ERROR_INVALID_VALUE);

  const CUaddress_mode modes[3] = {CU_TR_ADDRESS_MODE_WRAP, CU_TR_ADDRESS_MODE_MIRROR, CU_TR_ADDRESS_MODE_BORDER};
  for (int dim = 0; dim < 3; ++dim) CHECK(cuTexRefSetAddressMode(texref, dim, modes[dim]) == CUDA_SUCCESS);
  for (int dim = 0; dim < 3; ++dim) {
    CHECK(cuTexRefGetAddressMode(&mode, texref, dim) == CUDA_SUCCESS);
    CHECK(mode == modes[dim]);
  }
  CHECK(cuTexRefSetAddressMode(texref, 3, CU_TR_ADDRESS_MODE_WRAP) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefSetAddressMode(texref, -1, CU_TR_ADDRESS_MODE_WRAP) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefSetAddressMode(texref, 0, static_cast<CUaddress_mode>(4)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetAddressMode(&mode, texref, 3) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetAddressMode(nullptr, texref, 0) == CUDA_ERROR_INVALID_VALUE);

  CUfilter_mode filter = CU_TR_FILTER_MODE_POINT;
  CHECK(cuTexRefSetFilterMode(texref, CU_TR_FILTER_MODE_LINEAR) == CUDA_SUCCESS);
  CHECK(cuTexRefGetFilterMode(&filter, texref) == CUDA_SUCCESS);
  CHECK(filter == CU_TR_FILTER_MODE_LINEAR);
  CHECK(cuTexRefSetFilterMode(texref, static_cast<CUfilter_mode>(2)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetFilterMode(nullptr, texref) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefSetMipmapFilterMode(texref, CU_TR_FILTER_MODE_LINEAR) == CUDA_SUCCESS);
  filter = CU_TR_FILTER_MODE_POINT;
  CHECK(cuTexRefGetMipmapFilterMode(&filter, texref) == CUDA_SUCCESS);
  CHECK(filter == CU_TR_FILTER_MODE_LINEAR);
  CHECK(cuTexRefSetMipmapFilterMode(texref, static_cast<CUfilter_mode>(-1)) == CUDA_ERROR_INVALID_VALUE);

  float bias = 0, low = 0, high = 0;
  CHECK(cuTexRefSetMipmapLevelBias(texref, 1.5f) == CUDA_SUCCESS);
  CHECK(cuTexRefGetMipmapLevelBias(&bias, texref) == CUDA_SUCCESS);
  CHECK(bias == 1.5f);
  CHECK(cuTexRefSetMipmapLevelClamp(texref, 0.25f, 7.0f) == CUDA_SUCCESS);
  CHECK(cuTexRefGetMipmapLevelClamp(&low, &high, texref) == CUDA_SUCCESS);
  CHECK(low == 0.25f);
  CHECK(high == 7.0f);
  CHECK(cuTexRefGetMipmapLevelClamp(&low, nullptr, texref) == CUDA_ERROR_INVALID_VALUE);

  int anisotropy = 0;
  CHECK(cuTexRefSetMaxAnisotropy(texref, 8) == CUDA_SUCCESS);
  CHECK(cuTexRefGetMaxAnisotropy(&anisotropy, texref) == CUDA_SUCCESS);
  CHECK(anisotropy == 8);

  float border[4] = {0.1f, 0.2f, 0.3f, 1.0f};
  float read[4] = {};
  CHECK(cuTexRefSetBorderColor(texref, border) == CUDA_SUCCESS);
  CHECK(cuTexRefGetBorderColor(read, texref) == CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) CHECK(read[i] == border[i]);
  CHECK(cuTexRefSetBorderColor(texref, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetBorderColor(nullptr, texref) == CUDA_ERROR_INVALID_VALUE);

  unsigned flags = 0;
  const unsigned set = CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_READ_AS_INTEGER | CU_TRSF_SEAMLESS_CUBEMAP;
  CHECK(cuTexRefSetFlags(texref, set) == CUDA_SUCCESS);
  CHECK(cuTexRefGetFlags(&flags, texref) == CUDA_SUCCESS);
  CHECK(flags == set);
  CHECK(cuTexRefSetFlags(texref, 0x100) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetFlags(&flags, texref) == CUDA_SUCCESS);
  CHECK(flags == set);  // a refused call changes nothing
  CHECK(cuTexRefGetFlags(nullptr, texref) == CUDA_ERROR_INVALID_VALUE);

  // Nothing bound yet: no address, array or mipmapped array to answer.
  CUdeviceptr address = 0;
  CUarray array = nullptr;
  CUmipmappedArray mipmapped = nullptr;
  CHECK(cuTexRefGetAddress(&address, texref) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetArray(&array, texref) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetMipmappedArray(&mipmapped, texref) == CUDA_ERROR_INVALID_VALUE);

  // A handle that is no reference.
  int not_a_reference = 0;
  CHECK(cuTexRefSetFlags(reinterpret_cast<CUtexref>(&not_a_reference), 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetFlags(&flags, nullptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
}

TEST_CASE("texture references bind linear memory, pitched 2D memory, arrays and mipmapped arrays",
          "[driver][texref]") {
  primary_context();
  CUmodule module = load_module();
  CUtexref texref = module_texref(module);
  const int alignment = attribute(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  const int pitch_alignment = attribute(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT);
  REQUIRE(alignment > 0);
  REQUIRE(pitch_alignment > 0);
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH) > 0);

  CUdeviceptr memory = 0;
  const size_t bytes = 4 * kMiB;
  REQUIRE(cuMemAlloc(&memory, bytes) == CUDA_SUCCESS);

  SECTION("linear memory, with the byte offset of an unaligned pointer") {
    size_t offset = 99;
    CHECK(cuTexRefSetAddress(&offset, texref, memory, bytes) == CUDA_SUCCESS);
    CHECK(offset == 0);  // cuMemAlloc memory is aligned
    CUdeviceptr address = 0;
    CHECK(cuTexRefGetAddress(&address, texref) == CUDA_SUCCESS);
    CHECK(address == memory);
    CHECK(cuTexRefSetAddress(nullptr, texref, memory, bytes) == CUDA_SUCCESS);  // NULL when the offset is 0

    CHECK(cuTexRefSetAddress(&offset, texref, memory + 100, 1024) == CUDA_SUCCESS);
    CHECK(offset == 100 % static_cast<size_t>(alignment));
    CHECK(cuTexRefGetAddress(&address, texref) == CUDA_SUCCESS);
    CHECK(address == memory + 100 - offset);  // the aligned base the hardware reads from

    // Outside device memory, past the allocation, or host memory.
    CHECK(cuTexRefSetAddress(&offset, texref, memory, bytes + 1) == CUDA_ERROR_INVALID_VALUE);
    int host = 0;
    CHECK(cuTexRefSetAddress(&offset, texref, reinterpret_cast<CUdeviceptr>(&host), 4) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuTexRefSetAddress(&offset, texref, 0, 4) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuTexRefGetAddress(nullptr, texref) == CUDA_ERROR_INVALID_VALUE);

    // A binding to an array supersedes the address.
    CUarray array = make_array(0);
    CHECK(cuTexRefSetArray(texref, array, CU_TRSA_OVERRIDE_FORMAT) == CUDA_SUCCESS);
    CHECK(cuTexRefGetAddress(&address, texref) == CUDA_ERROR_INVALID_VALUE);
    REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  }

  SECTION("more texels than CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH") {
    const size_t width = static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH));
    CUdeviceptr large = 0;
    REQUIRE(cuMemAlloc(&large, width + 1) == CUDA_SUCCESS);
    CHECK(cuTexRefSetFormat(texref, CU_AD_FORMAT_UNSIGNED_INT8, 1) == CUDA_SUCCESS);
    CHECK(cuTexRefSetAddress(nullptr, texref, large, width + 1) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuTexRefSetAddress(nullptr, texref, large, width) == CUDA_SUCCESS);
    CHECK(cuTexRefSetFormat(texref, CU_AD_FORMAT_UNSIGNED_INT8, 2) == CUDA_SUCCESS);  // half as many texels
    CHECK(cuTexRefSetAddress(nullptr, texref, large, width + 1) == CUDA_SUCCESS);
    REQUIRE(cuMemFree(large) == CUDA_SUCCESS);
  }

  SECTION("pitched 2D memory, within the device's limits") {
    const size_t pitch = 1024;
    CUDA_ARRAY_DESCRIPTOR desc = pitched(200, 64, CU_AD_FORMAT_HALF, 2);
    CHECK(cuTexRefSetAddress2D(texref, &desc, memory, pitch) == CUDA_SUCCESS);
    CUdeviceptr address = 0;
    CHECK(cuTexRefGetAddress(&address, texref) == CUDA_SUCCESS);
    CHECK(address == memory);
    CUarray_format format = CU_AD_FORMAT_FLOAT;
    int channels = 0;
    CHECK(cuTexRefGetFormat(&format, &channels, texref) == CUDA_SUCCESS);  // the descriptor's format
    CHECK(format == CU_AD_FORMAT_HALF);
    CHECK(channels == 2);
    // cuTexRefSetFormat cannot follow cuTexRefSetAddress2D.
    CHECK(cuTexRefSetFormat(texref, CU_AD_FORMAT_FLOAT, 1) == CUDA_ERROR_INVALID_VALUE);

    CHECK(cuTexRefSetAddress2D(texref, &desc, memory + static_cast<size_t>(alignment) / 2, pitch) ==
          CUDA_ERROR_INVALID_VALUE);  // unaligned base
    CHECK(cuTexRefSetAddress2D(texref, &desc, memory, pitch + static_cast<size_t>(pitch_alignment) / 2) ==
          CUDA_ERROR_INVALID_VALUE);  // unaligned pitch
    CHECK(cuTexRefSetAddress2D(texref, &desc, memory, 512) == CUDA_ERROR_INVALID_VALUE);  // rows of 800 bytes
    CHECK(cuTexRefSetAddress2D(texref, nullptr, memory, pitch) == CUDA_ERROR_INVALID_VALUE);
    const size_t max_pitch = static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH));
    CUDA_ARRAY_DESCRIPTOR one_row = pitched(1, 1);
    CHECK(cuTexRefSetAddress2D(texref, &one_row, memory, max_pitch + static_cast<size_t>(pitch_alignment)) ==
          CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY_DESCRIPTOR wide =
        pitched(static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH)) + 1, 1);
    CHECK(cuTexRefSetAddress2D(texref, &wide, memory, max_pitch) == CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY_DESCRIPTOR tall =
        pitched(1, static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT)) + 1);
    CHECK(cuTexRefSetAddress2D(texref, &tall, memory, 32) == CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY_DESCRIPTOR beyond = pitched(256, bytes / pitch + 1);  // one row past the allocation
    CHECK(cuTexRefSetAddress2D(texref, &beyond, memory, pitch) == CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY_DESCRIPTOR three = pitched(16, 16, CU_AD_FORMAT_FLOAT, 3);
    CHECK(cuTexRefSetAddress2D(texref, &three, memory, pitch) == CUDA_ERROR_INVALID_VALUE);

    // The _v2 spelling (CUDA 3.2 to 4.0) takes the same arguments.
    using SetAddress2D = CUresult (*)(CUtexref, const CUDA_ARRAY_DESCRIPTOR*, CUdeviceptr, size_t);
    auto v2 = reinterpret_cast<SetAddress2D>(dlsym(RTLD_DEFAULT, "cuTexRefSetAddress2D_v2"));
    REQUIRE(v2 != nullptr);
    CUDA_ARRAY_DESCRIPTOR floats = pitched(16, 4);
    CHECK(v2(texref, &floats, memory + pitch, pitch) == CUDA_SUCCESS);
    CHECK(cuTexRefGetAddress(&address, texref) == CUDA_SUCCESS);
    CHECK(address == memory + pitch);
    CHECK(v2(texref, &floats, memory + 1, pitch) == CUDA_ERROR_INVALID_VALUE);
  }

  SECTION("arrays and mipmapped arrays, whose format replaces the reference's") {
    CUarray array = make_array(0, CU_AD_FORMAT_UNSIGNED_INT16, 2);
    CHECK(cuTexRefSetArray(texref, array, 0) == CUDA_ERROR_INVALID_VALUE);  // must be CU_TRSA_OVERRIDE_FORMAT
    CHECK(cuTexRefSetArray(texref, array, CU_TRSA_OVERRIDE_FORMAT) == CUDA_SUCCESS);
    CUarray bound = nullptr;
    CHECK(cuTexRefGetArray(&bound, texref) == CUDA_SUCCESS);
    CHECK(bound == array);
    CUarray_format format = CU_AD_FORMAT_FLOAT;
    int channels = 0;
    CHECK(cuTexRefGetFormat(&format, &channels, texref) == CUDA_SUCCESS);
    CHECK(format == CU_AD_FORMAT_UNSIGNED_INT16);
    CHECK(channels == 2);
    CHECK(cuTexRefGetArray(nullptr, texref) == CUDA_ERROR_INVALID_VALUE);

    const CUDA_ARRAY3D_DESCRIPTOR desc = descriptor(64, CU_AD_FORMAT_FLOAT, 4);
    CUmipmappedArray mipmapped = nullptr;
    REQUIRE(cuMipmappedArrayCreate(&mipmapped, &desc, 3) == CUDA_SUCCESS);
    CHECK(cuTexRefSetMipmappedArray(texref, mipmapped, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuTexRefSetMipmappedArray(texref, mipmapped, CU_TRSA_OVERRIDE_FORMAT) == CUDA_SUCCESS);
    CUmipmappedArray bound_mipmapped = nullptr;
    CHECK(cuTexRefGetMipmappedArray(&bound_mipmapped, texref) == CUDA_SUCCESS);
    CHECK(bound_mipmapped == mipmapped);
    CHECK(cuTexRefGetArray(&bound, texref) == CUDA_ERROR_INVALID_VALUE);  // superseded
    CHECK(cuTexRefGetFormat(&format, &channels, texref) == CUDA_SUCCESS);
    CHECK(format == CU_AD_FORMAT_FLOAT);
    CHECK(channels == 4);

    // An array handle that is not (or no longer) a live array, or the wrong kind of array.
    REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
    CHECK(cuTexRefSetArray(texref, array, CU_TRSA_OVERRIDE_FORMAT) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuTexRefSetArray(texref, reinterpret_cast<CUarray>(mipmapped), CU_TRSA_OVERRIDE_FORMAT) ==
          CUDA_ERROR_INVALID_VALUE);
    CHECK(cuTexRefSetMipmappedArray(texref, nullptr, CU_TRSA_OVERRIDE_FORMAT) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuTexRefGetMipmappedArray(&bound_mipmapped, texref) == CUDA_SUCCESS);  // unchanged
    CHECK(bound_mipmapped == mipmapped);
    REQUIRE(cuMipmappedArrayDestroy(mipmapped) == CUDA_SUCCESS);
    CHECK(cuTexRefSetMipmappedArray(texref, mipmapped, CU_TRSA_OVERRIDE_FORMAT) == CUDA_ERROR_INVALID_VALUE);
  }

  REQUIRE(cuMemFree(memory) == CUDA_SUCCESS);
  REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
}

TEST_CASE("cuTexRefCreate makes references that live until cuTexRefDestroy", "[driver][texref]") {
  primary_context();
  CUtexref first = nullptr, second = nullptr;
  REQUIRE(cuTexRefCreate(&first) == CUDA_SUCCESS);
  REQUIRE(cuTexRefCreate(&second) == CUDA_SUCCESS);
  CHECK(first != second);
  CHECK(cuTexRefCreate(nullptr) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuTexRefSetFilterMode(first, CU_TR_FILTER_MODE_LINEAR) == CUDA_SUCCESS);
  CUfilter_mode filter = CU_TR_FILTER_MODE_POINT;
  CHECK(cuTexRefGetFilterMode(&filter, first) == CUDA_SUCCESS);
  CHECK(filter == CU_TR_FILTER_MODE_LINEAR);
  CHECK(cuTexRefGetFilterMode(&filter, second) == CUDA_SUCCESS);  // settings are per reference
  CHECK(filter == CU_TR_FILTER_MODE_POINT);

  CHECK(cuTexRefDestroy(first) == CUDA_SUCCESS);
  CHECK(cuTexRefDestroy(first) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetFilterMode(&filter, first) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexRefGetFilterMode(&filter, second) == CUDA_SUCCESS);
  CHECK(cuTexRefDestroy(second) == CUDA_SUCCESS);
  CHECK(cuTexRefDestroy(nullptr) == CUDA_ERROR_INVALID_VALUE);

  // Without a current context.
  CUcontext ctx = nullptr;
  REQUIRE(cuCtxPopCurrent(&ctx) == CUDA_SUCCESS);
  CUtexref none = nullptr;
  CHECK(cuTexRefCreate(&none) == CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cuCtxPushCurrent(ctx) == CUDA_SUCCESS);
}

TEST_CASE("surface references bind arrays made for surface loads and stores", "[driver][texref]") {
  primary_context();
  CUmodule module = load_module();
  CUsurfref surface = nullptr;
  REQUIRE(cuModuleGetSurfRef(&surface, module, "out_surf") == CUDA_SUCCESS);
  CUarray bound = nullptr;
  CHECK(cuSurfRefGetArray(&bound, surface) == CUDA_ERROR_INVALID_VALUE);  // nothing bound yet

  CUarray plain = make_array(0);
  CHECK(cuSurfRefSetArray(surface, plain, 0) == CUDA_ERROR_INVALID_VALUE);  // no CUDA_ARRAY3D_SURFACE_LDST
  CUarray array = make_array(CUDA_ARRAY3D_SURFACE_LDST);
  CHECK(cuSurfRefSetArray(surface, array, 1) == CUDA_ERROR_INVALID_VALUE);  // Flags must be 0
  CHECK(cuSurfRefSetArray(surface, array, 0) == CUDA_SUCCESS);
  CHECK(cuSurfRefGetArray(&bound, surface) == CUDA_SUCCESS);
  CHECK(bound == array);
  CHECK(cuSurfRefGetArray(nullptr, surface) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuArrayDestroy(plain) == CUDA_SUCCESS);
  CHECK(cuSurfRefSetArray(surface, plain, 0) == CUDA_ERROR_INVALID_VALUE);  // destroyed
  CHECK(cuSurfRefSetArray(reinterpret_cast<CUsurfref>(&bound), array, 0) == CUDA_ERROR_INVALID_VALUE);

  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
  CHECK(cuSurfRefGetArray(&bound, surface) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("cuParamSetTexRef takes a module's reference on the default texture unit", "[driver][texref]") {
  primary_context();
  CUmodule module = load_module();
  CUfunction function = nullptr;
  REQUIRE(cuModuleGetFunction(&function, module, "sample") == CUDA_SUCCESS);
  CUtexref texref = module_texref(module);
  CHECK(cuParamSetTexRef(function, CU_PARAM_TR_DEFAULT, texref) == CUDA_SUCCESS);
  CHECK(cuParamSetTexRef(function, 0, texref) == CUDA_ERROR_INVALID_VALUE);
  CUtexref created = nullptr;
  REQUIRE(cuTexRefCreate(&created) == CUDA_SUCCESS);
  CHECK(cuParamSetTexRef(function, CU_PARAM_TR_DEFAULT, created) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuTexRefDestroy(created) == CUDA_SUCCESS);
  CHECK(cuParamSetTexRef(nullptr, CU_PARAM_TR_DEFAULT, texref) == CUDA_ERROR_INVALID_HANDLE);
  REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
  CHECK(cuParamSetTexRef(function, CU_PARAM_TR_DEFAULT, texref) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("cuGetProcAddress finds the reference calls, but not the 32-bit address forms", "[driver][texref]") {
  primary_context();
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CHECK(cuGetProcAddress("cuTexRefSetAddress", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuTexRefSetAddress_v2));
  CHECK(cuGetProcAddress("cuTexRefSetAddress2D", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuTexRefSetAddress2D_v3));
  CHECK(cuGetProcAddress("cuTexRefSetAddress2D", &fn, 4000, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS);
  CHECK(fn == dlsym(RTLD_DEFAULT, "cuTexRefSetAddress2D_v2"));
  CHECK(cuGetProcAddress("cuModuleGetSurfRef", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuModuleGetSurfRef));
  CHECK(cuGetProcAddress("cuTexRefGetAddress", &fn, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &found) ==
        CUDA_ERROR_NOT_FOUND);
}
