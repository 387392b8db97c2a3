// fmt's compiled part (its formatting engine), built once here for every target that links the
// allocation core: the shim, the tools, the tests. Compiled header-only instead, every translation
// unit that formats built the whole engine again, several seconds each, which made up much of a
// fresh build. Hidden like the rest of the core, so the shim never exports fmt or meets the host
// program's copy. What is instantiated is what fmt's headers declare as compiled elsewhere for
// `char` (format.h's extern templates, core.h's vformat_to).
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto decimal_point_impl(locale_ref) -> char;
template void buffer<char>::append(const char*, const char*);
template void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);
}  // namespace detail
FMT_END_NAMESPACE
