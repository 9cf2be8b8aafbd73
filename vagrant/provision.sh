#!/usr/bin/env bash
# Provision one node of the Vagrant cluster (see Vagrantfile):
#   provision.sh NODE_NAME NODE_IP ETCD_IP
# pyfelix into the virtualenv /opt/pyfelix (Debian packages included, by the Makefile), etcd on
# the node that holds ETCD_IP, loaded with examples/; the agent under systemd with the unit
# from examples/systemd; then pods for this node's workload endpoints.
set -euo pipefail

NODE=$1
IP=$2
ETCD_IP=$3
SRC=/opt/pyfelix-src
PYFELIX=/opt/pyfelix/bin/pyfelix
DATASTORE=etcd://$ETCD_IP:2379
export DEBIAN_FRONTEND=noninteractive

apt-get update -qq
apt-get install -y -qq --no-install-recommends make
make -C "$SRC" VENV=/opt/pyfelix venv

# A node routes for its pods (calico-node sets this, not Felix).
echo net.ipv4.ip_forward=1 > /etc/sysctl.d/90-pyfelix.conf
sysctl -q -p /etc/sysctl.d/90-pyfelix.conf

if [ "$IP" = "$ETCD_IP" ]; then
    cat > /etc/default/etcd <<CONF
ETCD_NAME=$NODE
ETCD_DATA_DIR=/var/lib/etcd/default
ETCD_LISTEN_CLIENT_URLS=http://$IP:2379,http://127.0.0.1:2379
ETCD_ADVERTISE_CLIENT_URLS=http://$IP:2379
CONF
    systemctl restart etcd
else
    # The Makefile installs etcd-server everywhere; only one node runs it.
    systemctl disable --now etcd || true
fi
for _ in $(seq 60); do
    if etcdctl --endpoints="http://$ETCD_IP:2379" endpoint health >/dev/null 2>&1; then
        break
    fi
    sleep 1
done
if [ "$IP" = "$ETCD_IP" ]; then
    "$PYFELIX" datastore --datastore "$DATASTORE" apply -f "$SRC/examples/"
fi

mkdir -p /etc/pyfelix
cat > /etc/pyfelix/pyfelix.env <<CONF
ETCD_ENDPOINTS=http://$ETCD_IP:2379
NODENAME=$NODE
CONF
install -m 0644 "$SRC/examples/systemd/pyfelix.service" /etc/systemd/system/pyfelix.service
systemctl daemon-reload
systemctl enable pyfelix
systemctl restart pyfelix

"$PYFELIX" pods down --hostname "$NODE" "$DATASTORE"
"$PYFELIX" pods up --hostname "$NODE" "$DATASTORE"
