/* The two OpenGL types the CUDA interop headers name (GLuint, GLenum), so that the simulator's
 * "not supported" stubs compile against NVIDIA's prototypes on machines without OpenGL headers.
 * Used only by the stubs (cudasim/stubs); nothing here calls OpenGL. */
#ifndef CUDASIM_COMPAT_GL_H
#define CUDASIM_COMPAT_GL_H
#define __gl_h_
#define GL_VERSION 0x1F02 /* cuda_gl_interop.h asks for it on ARM */
typedef unsigned int GLenum;
typedef unsigned int GLuint;
#endif
