// Texture and surface objects (texture_objects.cpp): what context destruction asks of them.
#pragma once

#include "state.h"

namespace cudasim {

// Destroys every texture and surface object created in the context (context destruction). Needs
// State::mu held.
void free_context_texture_objects(State& st, CUctx_st* ctx);

}  // namespace cudasim
