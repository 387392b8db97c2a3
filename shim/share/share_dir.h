// Where the ledgers live (GPUMEM_SHARE_DIR) and who may join them: a directory of this user (the
// default, /dev/shm/gpumem-<uid>, made 0700) that its group cannot write, or a group directory root
// made (group writable, setgid, not writable by others) whose group this process belongs to. Ledger files found
// there are trusted only when they are regular files of the same user, or of the directory's group
// in a group directory, writable by no one else.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <string>

namespace gpumem::shim::share {

struct ShareDir {
  std::string path;
  bool group = false;  // a group directory: files 0660 of its group, members of the group may join
  gid_t gid = 0;
};

// The default directory for this user: /dev/shm/gpumem-<uid> (/tmp/gpumem-<uid> without /dev/shm).
std::string default_share_dir();

// The directory `configured` (empty: the default, created if missing), checked as above. nullopt,
// with the reason in `why` ("... is a symbolic link", ...), when it may not be used. When another user
// made the default first, $XDG_RUNTIME_DIR/gpumem (made 0700) serves instead, if this user has a
// runtime directory; `why` then says so, on success too.
std::optional<ShareDir> open_share_dir(const std::string& configured, std::string& why);

// Whether a ledger file with status `st`, opened in `dir`, may be trusted; else the reason in `why`.
bool ledger_file_trusted(const struct stat& st, const ShareDir& dir, std::string& why);

}  // namespace gpumem::shim::share
