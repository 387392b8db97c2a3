/* The EGL integer type the CUDA interop headers name, for the simulator's stubs only (see GL/gl.h). */
#ifndef CUDASIM_COMPAT_EGL_H
#define CUDASIM_COMPAT_EGL_H
#include <stdint.h>
typedef int32_t EGLint;
#endif
