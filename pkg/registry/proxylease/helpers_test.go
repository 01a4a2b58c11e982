package proxylease

import (
	"sort"

	k8stypes "k8s.io/apimachinery/pkg/types"
)

func slicesSort(s []string) { sort.Strings(s) }

func uid(s string) k8stypes.UID { return k8stypes.UID(s) }
