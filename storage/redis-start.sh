#!/bin/sh
# Starts Redis for little-dist: storage/redis.conf plus an ACL file written here, at each
# start, from LITTLE_REDIS_PASSWORD. In it the default user is off (a client that does not
# log in can do nothing), and the fleet's user `little` may use every key, channel and
# command except Redis's administrative ones (@admin: CONFIG, DEBUG, SHUTDOWN, REPLICAOF,
# ACL changes, ...). The file holds the password's SHA-256, never the password itself.
#
#   LITTLE_REDIS_PASSWORD   the password of user `little` (required; URL-safe, e.g. hex)
#   LITTLE_REDIS_CONF       default /usr/local/etc/redis/redis.conf (where compose mounts it)
#   LITTLE_REDIS_ACL        default /tmp/little-redis/users.acl (a tmpfs in compose)
#
# Further arguments go to redis-server as configuration (`--port 6380`).
set -eu
: "${LITTLE_REDIS_PASSWORD:?set LITTLE_REDIS_PASSWORD (the Redis password of the fleet user little)}"
conf="${LITTLE_REDIS_CONF:-/usr/local/etc/redis/redis.conf}"
acl="${LITTLE_REDIS_ACL:-/tmp/little-redis/users.acl}"
umask 077
mkdir -p "$(dirname "$acl")"
hash=$(printf '%s' "$LITTLE_REDIS_PASSWORD" | sha256sum | cut -d ' ' -f 1)
printf 'user default off\nuser little on #%s ~* &* +@all -@admin\n' "$hash" >"$acl"
exec redis-server "$conf" --aclfile "$acl" "$@"
