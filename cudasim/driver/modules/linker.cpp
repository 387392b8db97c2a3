// The JIT linker (cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete, cuLinkDestroy). No
// device code exists to link: each input is checked as the driver checks its type, and the linked
// "cubin" is a 64-bit ELF image that holds every input, so cuModuleLoadData / cuLibraryLoadData
// accept it and find in it every entry point any input defines.
#include "contexts.h"
#include "kernels.h"
#include "state.h"

#include <elf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

using namespace cudasim;

namespace {

constexpr char kArchiveMagic[] = "!<arch>\n";  // an ar archive (CU_JIT_INPUT_LIBRARY)

// Writes `text` into a caller's log buffer of `*size_slot` bytes (truncated, NUL-terminated) and
// the bytes written, with the NUL, back into the size slot, as the driver does.
void write_log(char* buffer, void** size_slot, const std::string& text) {
  if (buffer == nullptr || size_slot == nullptr) return;
  const auto capacity = reinterpret_cast<std::uintptr_t>(*size_slot);
  if (capacity == 0) return;
  const std::size_t n = std::min<std::size_t>(text.size(), capacity - 1);
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
  *size_slot = reinterpret_cast<void*>(static_cast<std::uintptr_t>(n + 1));
}

// Checks the option arrays; `link` (cuLinkCreate) also keeps the output options' slots. The
// per-input options of cuLinkAddData/AddFile may not be output options (cuda.h).
CUresult read_options(unsigned count, CUjit_option* options, void** values, CUlinkState_st* link) {
  if (count > 0 && (options == nullptr || values == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    const int option = static_cast<int>(options[i]);
    if (option < 0 || option >= CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
    const bool output = option == CU_JIT_WALL_TIME || option == CU_JIT_INFO_LOG_BUFFER ||
                        option == CU_JIT_ERROR_LOG_BUFFER || option == CU_JIT_TARGET_FROM_CUCONTEXT ||
                        option == CU_JIT_TARGET;
    if (link == nullptr) {
      if (output) return CUDA_ERROR_INVALID_VALUE;
      continue;
    }
    switch (option) {
      case CU_JIT_WALL_TIME: link->wall_time = &values[i]; break;
      case CU_JIT_INFO_LOG_BUFFER: link->info_log = static_cast<char*>(values[i]); break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: link->info_log_size = &values[i]; break;
      case CU_JIT_ERROR_LOG_BUFFER: link->error_log = static_cast<char*>(values[i]); break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: link->error_log_size = &values[i]; break;
      default: break;
    }
  }
  return CUDA_SUCCESS;
}

// The bytes of one linker input of type `type`, or the error the driver gives for that type.
CUresult input_bytes(CUjitInputType type, const void* data, std::size_t size, std::string* out) {
  const auto* text = static_cast<const char*>(data);
  switch (type) {
    case CU_JIT_INPUT_PTX: {
      // Text that declares its version, up to its NUL or `size`.
      std::string ptx(text, strnlen(text, std::min(size, kMaxImageBytes)));
      if (ptx.find(".version") == std::string::npos) return CUDA_ERROR_INVALID_PTX;
      *out = std::move(ptx);
      return CUDA_SUCCESS;
    }
    case CU_JIT_INPUT_CUBIN:
    case CU_JIT_INPUT_FATBINARY: {
      std::uint32_t magic = 0;
      if (size >= sizeof magic) std::memcpy(&magic, text, sizeof magic);
      const bool matches = type == CU_JIT_INPUT_CUBIN ? size >= SELFMAG && std::memcmp(text, ELFMAG, SELFMAG) == 0
                                                      : magic == kFatbinMagic;
      std::optional<std::string> image = matches ? image_bytes(data, size) : std::nullopt;
      if (!image) return CUDA_ERROR_INVALID_IMAGE;
      *out = std::move(*image);
      return CUDA_SUCCESS;
    }
    case CU_JIT_INPUT_OBJECT:  // a host object file: an ELF relocatable holding a fat binary
      if (size < sizeof(Elf64_Ehdr) || std::memcmp(text, ELFMAG, SELFMAG) != 0) return CUDA_ERROR_INVALID_IMAGE;
      out->assign(text, size);
      return CUDA_SUCCESS;
    case CU_JIT_INPUT_LIBRARY:
      if (size < sizeof kArchiveMagic - 1 || std::memcmp(text, kArchiveMagic, sizeof kArchiveMagic - 1) != 0)
        return CUDA_ERROR_INVALID_IMAGE;
      out->assign(text, size);
      return CUDA_SUCCESS;
    case CU_JIT_INPUT_NVVM:  // LTO-IR is accepted only from toolkits before 12.0; none is simulated
      return CUDA_ERROR_INVALID_IMAGE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

const char* input_type_name(CUjitInputType type) {
  static const char* const names[] = {"cubin", "PTX", "fat binary", "host object", "library", "NVVM IR"};
  const int index = static_cast<int>(type);
  return index >= 0 && index < CU_JIT_NUM_INPUT_TYPES ? names[index] : "input";
}

CUresult add_input(CUlinkState state, CUjitInputType type, const void* data, std::size_t size, const char* name,
                   unsigned numOptions, CUjit_option* options, void** optionValues) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (!kernels(l.st).links.contains(state)) return CUDA_ERROR_INVALID_HANDLE;
  if (state->output.size() > 0) return CUDA_ERROR_INVALID_HANDLE;  // completed: no longer pending
  if (data == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = read_options(numOptions, options, optionValues, nullptr); rc != CUDA_SUCCESS) return rc;
  std::string bytes;
  if (CUresult rc = input_bytes(type, data, size, &bytes); rc != CUDA_SUCCESS) {
    if (rc != CUDA_ERROR_INVALID_VALUE)
      write_log(state->error_log, state->error_log_size,
                std::string("cudasim: ") + (name != nullptr ? name : "<unnamed>") + " is not a valid " +
                    input_type_name(type) + " input\n");
    return rc;
  }
  if (state->inputs.size() + bytes.size() + 1 > kMaxImageBytes) return CUDA_ERROR_OUT_OF_MEMORY;
  state->inputs.append(bytes).push_back('\0');
  state->input_count++;
  return CUDA_SUCCESS;
}

CUresult link_create(unsigned numOptions, CUjit_option* options, void** optionValues, CUlinkState* stateOut) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (stateOut == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto link = std::make_unique<CUlinkState_st>();
  if (CUresult rc = read_options(numOptions, options, optionValues, link.get()); rc != CUDA_SUCCESS) return rc;
  *stateOut = kernels(l.st).keep(link.release());
  return CUDA_SUCCESS;
}

CUresult link_add_file(CUlinkState state, CUjitInputType type, const char* path, unsigned numOptions,
                       CUjit_option* options, void** optionValues) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (!kernels(l.st).links.contains(state)) return CUDA_ERROR_INVALID_HANDLE;
    if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  std::string file;
  if (CUresult rc = read_image_file(path, &file); rc != CUDA_SUCCESS) return rc;
  // The NUL read_image_file appends ends PTX text; binary inputs are the file's bytes alone.
  const std::size_t size = type == CU_JIT_INPUT_PTX ? file.size() + 1 : file.size();
  return add_input(state, type, file.data(), size, path, numOptions, options, optionValues);
}

}  // namespace

namespace cudasim {

CUresult read_image_file(const char* path, std::string* out) {
  struct stat info {};
  if (::stat(path, &info) != 0 || !S_ISREG(info.st_mode)) return CUDA_ERROR_FILE_NOT_FOUND;
  if (static_cast<std::uint64_t>(info.st_size) > kMaxImageBytes) return CUDA_ERROR_INVALID_IMAGE;
  std::ifstream in(path, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  const std::streamoff size = info.st_size;
  out->assign(static_cast<std::size_t>(size), '\0');
  if (size > 0 && !in.read(out->data(), size)) return CUDA_ERROR_FILE_NOT_FOUND;
  return CUDA_SUCCESS;
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuLinkCreate(unsigned int numOptions, CUjit_option* options, void** optionValues,
                                     CUlinkState* stateOut) {
  return link_create(numOptions, options, optionValues, stateOut);
}
CUDASIM_EXPORT CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option* options, void** optionValues,
                                        CUlinkState* stateOut) {
  return link_create(numOptions, options, optionValues, stateOut);
}

CUDASIM_EXPORT CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                      const char* name, unsigned int numOptions, CUjit_option* options,
                                      void** optionValues) {
  return add_input(state, type, data, size, name, numOptions, options, optionValues);
}
CUDASIM_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                         const char* name, unsigned int numOptions, CUjit_option* options,
                                         void** optionValues) {
  return add_input(state, type, data, size, name, numOptions, options, optionValues);
}

CUDASIM_EXPORT CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char* path,
                                      unsigned int numOptions, CUjit_option* options, void** optionValues) {
  return link_add_file(state, type, path, numOptions, options, optionValues);
}
CUDASIM_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path,
                                         unsigned int numOptions, CUjit_option* options, void** optionValues) {
  return link_add_file(state, type, path, numOptions, options, optionValues);
}

CUDASIM_EXPORT CUresult cuLinkComplete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (!kernels(l.st).links.contains(state)) return CUDA_ERROR_INVALID_HANDLE;
  if (cubinOut == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (state->input_count == 0) {
    write_log(state->error_log, state->error_log_size, "cudasim: nothing to link: no input was added\n");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (state->output.empty()) {
    // An ELF header, the inputs, then one (null) section header, so that the image's headers give
    // its whole length, as image_bytes reads an ELF image.
    Elf64_Ehdr header{};
    std::memcpy(header.e_ident, ELFMAG, SELFMAG);
    header.e_ident[EI_CLASS] = ELFCLASS64;
    header.e_ident[EI_DATA] = ELFDATA2LSB;
    header.e_ident[EI_VERSION] = EV_CURRENT;
    header.e_type = ET_EXEC;
    header.e_machine = EM_CUDA;
    header.e_version = EV_CURRENT;
    header.e_ehsize = sizeof header;
    header.e_shentsize = sizeof(Elf64_Shdr);
    header.e_shnum = 1;
    header.e_shoff = sizeof header + state->inputs.size();
    const Elf64_Shdr null_section{};
    std::string& out = state->output;
    out.append(reinterpret_cast<const char*>(&header), sizeof header);
    out.append(state->inputs);
    out.append(reinterpret_cast<const char*>(&null_section), sizeof null_section);
    write_log(state->info_log, state->info_log_size,
              "cudasim: linked " + std::to_string(state->input_count) +
                  " input(s); the simulated device runs no device code\n");
    if (state->wall_time != nullptr) {
      const float no_time = 0.0f;  // milliseconds, written into the option's slot as the driver does
      std::memcpy(state->wall_time, &no_time, sizeof no_time);
    }
  }
  *cubinOut = state->output.data();
  if (sizeOut != nullptr) *sizeOut = state->output.size();
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuLinkDestroy(CUlinkState state) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(l.st);
  if (!ks.links.erase(state)) return CUDA_ERROR_INVALID_HANDLE;
  // The object stays (a stale handle is recognised); its memory goes.
  std::string().swap(state->inputs);
  std::string().swap(state->output);
  return CUDA_SUCCESS;
}
