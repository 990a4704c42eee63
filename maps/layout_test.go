package maps

import "unsafe"

func sizeofSample(s sluiceSample) uintptr { return unsafe.Sizeof(s) }
func offsetofReqSeq() uintptr             { return unsafe.Offsetof(sluiceSample{}.ReqSeq) }
func offsetofFragOff() uintptr            { return unsafe.Offsetof(sluiceSample{}.FragOff) }
func offsetofReqLen() uintptr             { return unsafe.Offsetof(sluiceSample{}.ReqLen) }
func offsetofLen() uintptr                { return unsafe.Offsetof(sluiceSample{}.Len) }
func offsetofData() uintptr               { return unsafe.Offsetof(sluiceSample{}.Data) }
func offsetofBorn() uintptr               { return unsafe.Offsetof(sluiceSample{}.ConnBorn) }
func offsetofBound() uintptr              { return unsafe.Offsetof(sluiceSample{}.Bound) }
