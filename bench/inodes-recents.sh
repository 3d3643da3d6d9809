#!/usr/bin/env bash
# depot-fichiers — bench/inodes-recents.py sur trois disques : le / de la machine tel qu'il est,
# puis une image loop ext4 avec journal (mkfs.ext4 par défaut) et la même sans journal, toutes
# deux montées sans discard. En root (losetup, mount). Paquets : e2fsprogs, util-linux, python3.
set -euo pipefail
RACINE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
travail="$(mktemp -d /var/tmp/inodes-recents.XXXXXX)"
point="$travail/point"; img="$travail/image"; mkdir -p "$point"
finir() { umount "$point" 2>/dev/null || true; rm -rf "$travail"; }
trap finir EXIT
echo "== / : $(findmnt -no FSTYPE,OPTIONS /) ; journal : $(cat /sys/fs/ext4/"$(basename "$(findmnt -no SOURCE /)")"/journal_task 2>/dev/null || echo '?')"
mkdir -p "$travail/racine"
python3 "$RACINE/bench/inodes-recents.py" "$travail/racine" 10000 70
for options in "" "-O ^has_journal"; do
    truncate -s 2G "$img"
    # shellcheck disable=SC2086
    mkfs.ext4 -q -F $options "$img"
    mount -o loop "$img" "$point"
    echo "== image loop ext4 ${options:-avec journal (défaut)}, sans discard"
    python3 "$RACINE/bench/inodes-recents.py" "$point" 10000 70
    umount "$point"; rm -f "$img"
done
